// numpy arrays and scalars as msgpack-numpy puts them on the wire (PROTOCOL.md section 4).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rlinks {

using Bytes = std::vector<uint8_t>;

// numpy's dtype.str: byte order, kind and item size ("<f4", "|b1", ">i8", "<U3").
struct DType {
  char byte_order = '<';  // '<' little-endian, '>' big-endian, '|' not applicable
  char kind = 'f';        // b bool, i int, u uint, f float, c complex, S bytes, U UCS-4 text
  uint32_t item_size = 4;  // bytes per element (4 per character for U)

  // Reads a dtype string from the wire. Object, void, datetime and timedelta
  // kinds are unsafe_payload; anything else that is not kind + size is bad_body.
  static DType parse(std::string_view text);
  static DType float32() { return {'<', 'f', 4}; }
  static DType int64() { return {'<', 'i', 8}; }
  static DType boolean() { return {'|', 'b', 1}; }

  std::string str() const;
  bool is_numeric() const { return kind == 'b' || kind == 'i' || kind == 'u' || kind == 'f'; }
  bool operator==(const DType& other) const {
    return byte_order == other.byte_order && kind == other.kind && item_size == other.item_size;
  }
  bool operator!=(const DType& other) const { return !(*this == other); }
};

// An immutable array (or numpy scalar). A decoded array shares the bytes of
// the frame it came in, so large weights are not copied again.
class NdArray {
 public:
  // Takes `data` (C order, in the byte order of `dtype`); its length must be
  // the product of `shape` times the item size.
  NdArray(DType dtype, std::vector<uint64_t> shape, Bytes data);
  static NdArray scalar(DType dtype, Bytes data);
  // A view of `length` bytes at `offset` of `storage`, checked like the constructor.
  static NdArray view(DType dtype, std::vector<uint64_t> shape, bool is_scalar,
                      std::shared_ptr<const Bytes> storage, size_t offset, size_t length);

  static NdArray from_float32(std::vector<uint64_t> shape, const float* values);
  static NdArray from_int64(std::vector<uint64_t> shape, const int64_t* values);
  // A bool array (|b1) of shape (flags.size(),).
  static NdArray from_bools(const std::vector<bool>& flags);

  const DType& dtype() const { return dtype_; }
  const std::vector<uint64_t>& shape() const { return shape_; }
  bool is_scalar() const { return is_scalar_; }
  size_t size() const { return nbytes_ / (dtype_.item_size ? dtype_.item_size : 1); }
  const uint8_t* data() const { return storage_->data() + offset_; }
  size_t nbytes() const { return nbytes_; }

  // Element i (flat, C order) converted; each asks for fitting kinds:
  // number() for b/i/u/f, signed_at()/unsigned_at() for b/i/u, complex_at() for c.
  double number(size_t i) const;
  int64_t signed_at(size_t i) const;
  uint64_t unsigned_at(size_t i) const;
  std::pair<double, double> complex_at(size_t i) const;
  // Every element as float32 (numeric kinds only).
  std::vector<float> to_float32() const;

  bool operator==(const NdArray& other) const;

 private:
  NdArray(DType dtype, std::vector<uint64_t> shape, bool is_scalar, std::shared_ptr<const Bytes> storage,
          size_t offset, size_t length);
  uint64_t raw_bits(const uint8_t* element, size_t width) const;

  DType dtype_;
  std::vector<uint64_t> shape_;
  bool is_scalar_ = false;
  std::shared_ptr<const Bytes> storage_;
  size_t offset_ = 0;
  size_t nbytes_ = 0;
};

// Element count of `shape` (0 if any dimension is 0); sets `overflow` when
// the product does not fit in 64 bits.
uint64_t element_count(const std::vector<uint64_t>& shape, bool& overflow);

// Writers for one element of `dtype` at `out` (item_size bytes), in its byte order.
void store_number(const DType& dtype, uint8_t* out, double value);
void store_signed(const DType& dtype, uint8_t* out, int64_t value);
void store_unsigned(const DType& dtype, uint8_t* out, uint64_t value);
void store_complex(const DType& dtype, uint8_t* out, double real, double imag);

// IEEE half precision, round to nearest even.
uint16_t float16_bits(double value);
double float16_value(uint16_t bits);

}  // namespace rlinks
