// Every error the library throws, rooted at rlinks::Error (PROTOCOL.md section 11).
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace rlinks {

// The codes an ERROR message may carry, plus unexpected_message, which is
// never sent: it is how this client reports a server reply out of turn.
enum class ErrorCode {
  protocol_error,
  bad_frame,
  frame_too_large,
  bad_body,
  unsafe_payload,
  invalid_message,
  unsupported_message,
  auth_failed,
  limit_exceeded,
  bad_episode,
  server_error,
  shutting_down,
  unexpected_message,
};

// The code as spelled on the wire ("bad_frame", ...).
const char* to_string(ErrorCode code);

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The peer's bytes or messages broke the protocol.
class ProtocolError : public Error {
 public:
  ProtocolError(ErrorCode code, const std::string& what);
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// The server sent ERROR {code, message}. The code stays text: a newer server
// may send codes this library does not know.
class ServerError : public Error {
 public:
  ServerError(std::string code, std::string text);
  const std::string& code() const noexcept { return code_; }
  const std::string& text() const noexcept { return text_; }

 private:
  std::string code_;
  std::string text_;
};

// The learner ended the run (ERROR shutting_down, told to EnvClient): the
// normal end of training, not a failure.
class TrainingEnded : public ServerError {
 public:
  explicit TrainingEnded(std::string text) : ServerError("shutting_down", std::move(text)) {}
};

// A call made, or waiting, after stop() or close() (StopSignal, EnvClient).
class ClientClosed : public Error {
 public:
  using Error::Error;
};

// An open connection dropped, or the peer closed it.
class ConnectionLost : public Error {
 public:
  using Error::Error;
};

// No attempt to open a connection (and finish its handshake) succeeded.
class ConnectFailed : public Error {
 public:
  using Error::Error;
};

// A bounded wait ran out.
class Timeout : public Error {
 public:
  using Error::Error;
};

// Our own caller asked for something the protocol or this API does not allow
// (a bug in the caller, never the peer's fault; never sent as a code).
class UsageError : public Error {
 public:
  using Error::Error;
};

// A feature this build leaves out (authentication and TLS need OpenSSL).
class NotAvailable : public Error {
 public:
  using Error::Error;
};

// The server did not agree to an extension the call needs (a runner that
// does not compute actions, asked for one: served_actions, section 10.5).
class NotAgreed : public Error {
 public:
  using Error::Error;
};

// The TLS session could not be set up: an untrusted certificate, or the
// server wanted a client certificate (never retried).
class TlsFailed : public Error {
 public:
  using Error::Error;
};

// The weights are not those of a model this client can run.
class UnsupportedModel : public Error {
 public:
  using Error::Error;
};

}  // namespace rlinks
