// RLlink framing: 8 ASCII decimal digits giving the body length, then the body (PROTOCOL.md section 2).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "rlinks/errors.hpp"
#include "rlinks/value.hpp"

namespace rlinks {

constexpr size_t kHeaderBytes = 8;
constexpr uint32_t kMaxBodyBytes = 99'999'999;
constexpr uint32_t kDefaultMaxFrameBytes = 64u * 1024 * 1024;

// One whole frame (header and body) for `message`. Throws UsageError when
// `message` is not a valid message or its body would exceed kMaxBodyBytes.
Bytes encode_frame(const Value& message);

// Turns a byte stream, split anywhere, back into validated messages.
class FrameDecoder {
 public:
  explicit FrameDecoder(uint32_t max_frame_bytes = kDefaultMaxFrameBytes);

  // Takes the next `size` bytes of the stream and appends the messages they
  // complete to `out`. Throws ProtocolError (bad_frame, frame_too_large from
  // the header alone, or a body's decoding or validation error) after
  // appending the messages decoded before it; the decoder is then spent and
  // every later call throws the same error.
  void feed(const uint8_t* data, size_t size, std::vector<Value>& out);

  // The unfilled rest of the body in progress, to receive straight into
  // (nullptr when no body is in progress); report what was written with
  // body_filled().
  uint8_t* body_space(size_t& size);
  void body_filled(size_t size, std::vector<Value>& out);

  // The stream ended. Throws bad_frame if it ended inside a frame.
  void eof();

  bool in_frame() const { return header_size_ > 0 || body_ != nullptr; }
  size_t frames() const { return frames_; }
  void set_max_frame_bytes(uint32_t max_frame_bytes);

 private:
  void throw_if_spent() const;
  void start_body();
  void finish_body(std::vector<Value>& out);

  uint32_t max_frame_bytes_;
  uint8_t header_[kHeaderBytes] = {};
  size_t header_size_ = 0;
  std::shared_ptr<Bytes> body_;
  size_t filled_ = 0;
  size_t frames_ = 0;
  std::optional<ProtocolError> error_;
};

}  // namespace rlinks
