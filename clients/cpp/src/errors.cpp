#include "rlinks/errors.hpp"

#include <utility>

namespace rlinks {

const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::protocol_error: return "protocol_error";
    case ErrorCode::bad_frame: return "bad_frame";
    case ErrorCode::frame_too_large: return "frame_too_large";
    case ErrorCode::bad_body: return "bad_body";
    case ErrorCode::unsafe_payload: return "unsafe_payload";
    case ErrorCode::invalid_message: return "invalid_message";
    case ErrorCode::unsupported_message: return "unsupported_message";
    case ErrorCode::auth_failed: return "auth_failed";
    case ErrorCode::limit_exceeded: return "limit_exceeded";
    case ErrorCode::bad_episode: return "bad_episode";
    case ErrorCode::server_error: return "server_error";
    case ErrorCode::shutting_down: return "shutting_down";
    case ErrorCode::unexpected_message: return "unexpected_message";
  }
  return "protocol_error";
}

ProtocolError::ProtocolError(ErrorCode code, const std::string& what) : Error(what), code_(code) {}

ServerError::ServerError(std::string code, std::string text)
    : Error("the server sent ERROR " + code + ": " + text), code_(std::move(code)), text_(std::move(text)) {}

}  // namespace rlinks
