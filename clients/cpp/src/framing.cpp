#include "rlinks/framing.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "rlinks/messages.hpp"
#include "rlinks/msgpack.hpp"

namespace rlinks {

Bytes encode_frame(const Value& message) {
  try {
    validate_message(message);
  } catch (const ProtocolError& error) {
    throw UsageError(std::string("refusing to send an invalid message: ") + error.what());
  }
  Bytes frame(kHeaderBytes, '0');
  msgpack::encode(message, frame);
  size_t body_size = frame.size() - kHeaderBytes;
  if (body_size > kMaxBodyBytes) {
    throw UsageError("message body is " + std::to_string(body_size) + " bytes; RLlink's 8-digit header allows at most " +
                     std::to_string(kMaxBodyBytes) + ". Send fewer episodes per message.");
  }
  for (size_t i = kHeaderBytes; i-- > 0; body_size /= 10) frame[i] = uint8_t('0' + body_size % 10);
  return frame;
}

FrameDecoder::FrameDecoder(uint32_t max_frame_bytes) { set_max_frame_bytes(max_frame_bytes); }

void FrameDecoder::set_max_frame_bytes(uint32_t max_frame_bytes) {
  if (max_frame_bytes == 0 || max_frame_bytes > kMaxBodyBytes) {
    throw UsageError("max_frame_bytes must be in 1.." + std::to_string(kMaxBodyBytes));
  }
  max_frame_bytes_ = max_frame_bytes;
}

void FrameDecoder::throw_if_spent() const {
  if (error_) throw *error_;
}

void FrameDecoder::feed(const uint8_t* data, size_t size, std::vector<Value>& out) {
  throw_if_spent();
  try {
    size_t pos = 0;
    while (pos < size) {
      if (body_ != nullptr) {
        const size_t take = std::min(body_->size() - filled_, size - pos);
        std::memcpy(body_->data() + filled_, data + pos, take);
        filled_ += take;
        pos += take;
        if (filled_ == body_->size()) finish_body(out);
        continue;
      }
      const size_t take = std::min(kHeaderBytes - header_size_, size - pos);
      std::memcpy(header_ + header_size_, data + pos, take);
      header_size_ += take;
      pos += take;
      if (header_size_ == kHeaderBytes) start_body();
    }
  } catch (const ProtocolError& error) {
    error_ = error;
    throw;
  }
}

uint8_t* FrameDecoder::body_space(size_t& size) {
  if (body_ == nullptr || error_) {
    size = 0;
    return nullptr;
  }
  size = body_->size() - filled_;
  return body_->data() + filled_;
}

void FrameDecoder::body_filled(size_t size, std::vector<Value>& out) {
  throw_if_spent();
  if (body_ == nullptr || size > body_->size() - filled_) throw UsageError("body_filled() without body_space()");
  filled_ += size;
  if (filled_ < body_->size()) return;
  try {
    finish_body(out);
  } catch (const ProtocolError& error) {
    error_ = error;
    throw;
  }
}

void FrameDecoder::eof() {
  throw_if_spent();
  if (!in_frame()) return;
  const size_t got = body_ != nullptr ? kHeaderBytes + filled_ : header_size_;
  error_ = ProtocolError(ErrorCode::bad_frame,
                         "the stream ended mid-frame, after " + std::to_string(got) + " bytes of the frame");
  throw *error_;
}

void FrameDecoder::start_body() {
  uint64_t size = 0;
  for (uint8_t digit : header_) {
    if (digit < '0' || digit > '9') {
      std::string shown;
      for (uint8_t byte : header_) shown += (byte >= 0x20 && byte < 0x7f) ? char(byte) : '?';
      throw ProtocolError(ErrorCode::bad_frame, "frame header must be 8 ASCII digits, got '" + shown + "'");
    }
    size = size * 10 + (digit - '0');
  }
  header_size_ = 0;
  if (size > max_frame_bytes_) {
    throw ProtocolError(ErrorCode::frame_too_large, "frame of " + std::to_string(size) +
                                                        " bytes exceeds the limit of " +
                                                        std::to_string(max_frame_bytes_) + " bytes");
  }
  if (size == 0) throw ProtocolError(ErrorCode::bad_frame, "frame with an empty body");
  body_ = std::make_shared<Bytes>(size);
  filled_ = 0;
}

void FrameDecoder::finish_body(std::vector<Value>& out) {
  std::shared_ptr<const Bytes> body = std::move(body_);
  body_ = nullptr;
  filled_ = 0;
  Value message = msgpack::decode(std::move(body));
  validate_message(message);
  ++frames_;
  out.push_back(std::move(message));
}

}  // namespace rlinks
