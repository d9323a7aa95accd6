#include "rlinks/ndarray.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include "rlinks/errors.hpp"

namespace rlinks {
namespace {

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
constexpr char kNativeOrder = '>';
#else
constexpr char kNativeOrder = '<';
#endif

constexpr size_t kMaxDTypeChars = 16;

ProtocolError bad_dtype(std::string_view text) {
  return ProtocolError(ErrorCode::bad_body, "not a numpy dtype: '" + std::string(text.substr(0, 32)) + "'");
}

bool valid_size(char kind, uint64_t size) {
  switch (kind) {
    case 'b': return size == 1;
    case 'i':
    case 'u': return size == 1 || size == 2 || size == 4 || size == 8;
    case 'f': return size == 2 || size == 4 || size == 8;
    case 'c': return size == 8 || size == 16;
    case 'S': return size <= (1u << 30);
    case 'U': return size <= (1u << 28);
    default: return false;
  }
}

void store_bits(const DType& dtype, uint8_t* out, uint64_t bits, size_t width) {
  for (size_t i = 0; i < width; ++i) {
    const uint8_t byte = uint8_t(bits >> (8 * i));
    out[dtype.byte_order == '>' ? width - 1 - i : i] = byte;
  }
}

uint64_t float_bits(double value, size_t width) {
  if (width == 2) return float16_bits(value);
  if (width == 4) {
    const float single = float(value);
    uint32_t bits;
    std::memcpy(&bits, &single, 4);
    return bits;
  }
  uint64_t bits;
  std::memcpy(&bits, &value, 8);
  return bits;
}

double float_value(uint64_t bits, size_t width) {
  if (width == 2) return float16_value(uint16_t(bits));
  if (width == 4) {
    const uint32_t narrow = uint32_t(bits);
    float single;
    std::memcpy(&single, &narrow, 4);
    return single;
  }
  double value;
  std::memcpy(&value, &bits, 8);
  return value;
}

int64_t sign_extend(uint64_t bits, size_t width) {
  if (width == 8) return int64_t(bits);
  const uint64_t sign = uint64_t(1) << (8 * width - 1);
  return int64_t((bits ^ sign) - sign);
}

UsageError wrong_kind(const DType& dtype, const char* wanted) {
  return UsageError("a " + dtype.str() + " array has no " + wanted + " elements");
}

}  // namespace

DType DType::parse(std::string_view text) {
  if (text.size() > kMaxDTypeChars) {
    throw ProtocolError(ErrorCode::bad_body, "array dtype string too long: '" + std::string(text.substr(0, 32)) + "'");
  }
  size_t pos = 0;
  char order = '=';
  if (!text.empty() && std::strchr("<>|=", text[0]) != nullptr) {
    order = text[0];
    pos = 1;
  }
  if (pos >= text.size()) throw bad_dtype(text);
  const char kind = text[pos++];
  if (kind == 'O' || kind == 'V' || kind == 'M' || kind == 'm') {
    throw ProtocolError(ErrorCode::unsafe_payload,
                        "array dtype '" + std::string(text) +
                            "' is not allowed; only bool, int, uint, float, complex, bytes and str arrays are");
  }
  const std::string_view digits = text.substr(pos);
  if (digits.empty() || digits.size() > 9) throw bad_dtype(text);
  uint64_t size = 0;
  for (char digit : digits) {
    if (digit < '0' || digit > '9') throw bad_dtype(text);
    size = size * 10 + uint64_t(digit - '0');
  }
  if (!valid_size(kind, size)) throw bad_dtype(text);

  DType dtype;
  dtype.kind = kind;
  dtype.item_size = uint32_t(kind == 'U' ? 4 * size : size);
  if (kind == 'S' || (kind != 'U' && dtype.item_size == 1)) {
    dtype.byte_order = '|';
  } else {
    dtype.byte_order = (order == '<' || order == '>') ? order : kNativeOrder;
  }
  return dtype;
}

std::string DType::str() const {
  return std::string(1, byte_order) + kind + std::to_string(kind == 'U' ? item_size / 4 : item_size);
}

uint64_t element_count(const std::vector<uint64_t>& shape, bool& overflow) {
  overflow = false;
  uint64_t count = 1;
  for (uint64_t dim : shape) {
    if (dim == 0) {
      overflow = false;
      return 0;
    }
    if (!overflow && count > std::numeric_limits<uint64_t>::max() / dim) overflow = true;
    if (!overflow) count *= dim;
  }
  return overflow ? 0 : count;
}

NdArray::NdArray(DType dtype, std::vector<uint64_t> shape, bool is_scalar, std::shared_ptr<const Bytes> storage,
                 size_t offset, size_t length)
    : dtype_(dtype), shape_(std::move(shape)), is_scalar_(is_scalar), storage_(std::move(storage)),
      offset_(offset), nbytes_(length) {
  bool overflow = false;
  const uint64_t count = is_scalar_ ? 1 : element_count(shape_, overflow);
  if (is_scalar_ && !shape_.empty()) throw UsageError("a numpy scalar has no shape");
  if (overflow || count > std::numeric_limits<uint64_t>::max() / (dtype_.item_size ? dtype_.item_size : 1) ||
      count * dtype_.item_size != length || offset > storage_->size() || storage_->size() - offset < length) {
    throw UsageError("array data of " + std::to_string(length) + " bytes does not fit dtype " + dtype_.str() +
                     " and its shape");
  }
}

NdArray::NdArray(DType dtype, std::vector<uint64_t> shape, Bytes data) {
  const size_t length = data.size();
  *this = NdArray(dtype, std::move(shape), false, std::make_shared<const Bytes>(std::move(data)), 0, length);
}

NdArray NdArray::scalar(DType dtype, Bytes data) {
  const size_t length = data.size();
  return NdArray(dtype, {}, true, std::make_shared<const Bytes>(std::move(data)), 0, length);
}

NdArray NdArray::view(DType dtype, std::vector<uint64_t> shape, bool is_scalar, std::shared_ptr<const Bytes> storage,
                      size_t offset, size_t length) {
  return NdArray(dtype, std::move(shape), is_scalar, std::move(storage), offset, length);
}

NdArray NdArray::from_float32(std::vector<uint64_t> shape, const float* values) {
  bool overflow = false;
  const uint64_t count = element_count(shape, overflow);
  const DType dtype = DType::float32();
  Bytes data(count * 4);
  for (uint64_t i = 0; i < count; ++i) store_number(dtype, &data[i * 4], values[i]);
  return NdArray(dtype, std::move(shape), std::move(data));
}

NdArray NdArray::from_int64(std::vector<uint64_t> shape, const int64_t* values) {
  bool overflow = false;
  const uint64_t count = element_count(shape, overflow);
  const DType dtype = DType::int64();
  Bytes data(count * 8);
  for (uint64_t i = 0; i < count; ++i) store_signed(dtype, &data[i * 8], values[i]);
  return NdArray(dtype, std::move(shape), std::move(data));
}

NdArray NdArray::from_bools(const std::vector<bool>& flags) {
  Bytes data(flags.size());
  for (size_t i = 0; i < flags.size(); ++i) data[i] = flags[i] ? 1 : 0;
  return NdArray(DType::boolean(), {uint64_t(flags.size())}, std::move(data));
}

uint64_t NdArray::raw_bits(const uint8_t* element, size_t width) const {
  uint64_t bits = 0;
  for (size_t i = 0; i < width; ++i) {
    const uint8_t byte = element[dtype_.byte_order == '>' ? i : width - 1 - i];
    bits = (bits << 8) | byte;
  }
  return bits;
}

double NdArray::number(size_t i) const {
  const size_t width = dtype_.item_size;
  const uint64_t bits = raw_bits(data() + i * width, width);
  switch (dtype_.kind) {
    case 'b': return bits != 0 ? 1.0 : 0.0;
    case 'i': return double(sign_extend(bits, width));
    case 'u': return double(bits);
    case 'f': return float_value(bits, width);
    default: throw wrong_kind(dtype_, "real");
  }
}

int64_t NdArray::signed_at(size_t i) const {
  const size_t width = dtype_.item_size;
  const uint64_t bits = raw_bits(data() + i * width, width);
  if (dtype_.kind == 'i') return sign_extend(bits, width);
  if (dtype_.kind == 'b') return bits != 0;
  if (dtype_.kind == 'u' && bits <= uint64_t(std::numeric_limits<int64_t>::max())) return int64_t(bits);
  throw wrong_kind(dtype_, "int64");
}

uint64_t NdArray::unsigned_at(size_t i) const {
  const size_t width = dtype_.item_size;
  const uint64_t bits = raw_bits(data() + i * width, width);
  if (dtype_.kind == 'u') return bits;
  if (dtype_.kind == 'b') return bits != 0;
  if (dtype_.kind == 'i' && sign_extend(bits, width) >= 0) return bits;
  throw wrong_kind(dtype_, "uint64");
}

std::pair<double, double> NdArray::complex_at(size_t i) const {
  if (dtype_.kind != 'c') throw wrong_kind(dtype_, "complex");
  const size_t half = dtype_.item_size / 2;
  const uint8_t* element = data() + i * dtype_.item_size;
  return {float_value(raw_bits(element, half), half), float_value(raw_bits(element + half, half), half)};
}

std::vector<float> NdArray::to_float32() const {
  std::vector<float> out(size());
  if (dtype_.kind == 'f' && dtype_.item_size == 4 && dtype_.byte_order == kNativeOrder) {
    if (!out.empty()) std::memcpy(out.data(), data(), nbytes_);
    return out;
  }
  if (!dtype_.is_numeric()) throw wrong_kind(dtype_, "real");
  for (size_t i = 0; i < out.size(); ++i) out[i] = float(number(i));
  return out;
}

bool NdArray::operator==(const NdArray& other) const {
  return dtype_ == other.dtype_ && is_scalar_ == other.is_scalar_ && shape_ == other.shape_ &&
         nbytes_ == other.nbytes_ && (nbytes_ == 0 || std::memcmp(data(), other.data(), nbytes_) == 0);
}

void store_number(const DType& dtype, uint8_t* out, double value) {
  switch (dtype.kind) {
    case 'b': store_bits(dtype, out, value != 0.0 ? 1 : 0, 1); return;
    case 'i': store_bits(dtype, out, uint64_t(int64_t(value)), dtype.item_size); return;
    case 'u': store_bits(dtype, out, uint64_t(value), dtype.item_size); return;
    case 'f': store_bits(dtype, out, float_bits(value, dtype.item_size), dtype.item_size); return;
    default: throw wrong_kind(dtype, "real");
  }
}

void store_signed(const DType& dtype, uint8_t* out, int64_t value) {
  if (dtype.kind == 'f') return store_number(dtype, out, double(value));
  if (dtype.kind != 'i' && dtype.kind != 'u' && dtype.kind != 'b') throw wrong_kind(dtype, "integer");
  store_bits(dtype, out, uint64_t(value), dtype.item_size);
}

void store_unsigned(const DType& dtype, uint8_t* out, uint64_t value) {
  if (dtype.kind == 'f') return store_number(dtype, out, double(value));
  if (dtype.kind != 'i' && dtype.kind != 'u' && dtype.kind != 'b') throw wrong_kind(dtype, "integer");
  store_bits(dtype, out, value, dtype.item_size);
}

void store_complex(const DType& dtype, uint8_t* out, double real, double imag) {
  if (dtype.kind != 'c') throw wrong_kind(dtype, "complex");
  const size_t half = dtype.item_size / 2;
  store_bits(dtype, out, float_bits(real, half), half);
  store_bits(dtype, out + half, float_bits(imag, half), half);
}

uint16_t float16_bits(double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, 8);
  const uint16_t sign = uint16_t((bits >> 48) & 0x8000);
  const int exponent = int((bits >> 52) & 0x7ff);
  uint64_t mantissa = bits & ((uint64_t(1) << 52) - 1);
  if (exponent == 0x7ff) return uint16_t(sign | 0x7c00 | (mantissa ? 0x200 : 0));
  const int half_exponent = exponent - 1023 + 15;
  if (half_exponent >= 31) return uint16_t(sign | 0x7c00);
  if (half_exponent <= 0) {
    if (half_exponent < -10) return sign;
    mantissa |= uint64_t(1) << 52;
    const int shift = 42 + 1 - half_exponent;
    uint64_t half_mantissa = mantissa >> shift;
    const uint64_t rest = mantissa & ((uint64_t(1) << shift) - 1);
    const uint64_t halfway = uint64_t(1) << (shift - 1);
    if (rest > halfway || (rest == halfway && (half_mantissa & 1))) ++half_mantissa;
    return uint16_t(sign | half_mantissa);
  }
  uint32_t result = (uint32_t(half_exponent) << 10) | uint32_t(mantissa >> 42);
  const uint64_t rest = mantissa & ((uint64_t(1) << 42) - 1);
  const uint64_t halfway = uint64_t(1) << 41;
  if (rest > halfway || (rest == halfway && (result & 1))) ++result;  // a carry into the exponent is right
  return uint16_t(sign | result);
}

double float16_value(uint16_t bits) {
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  double magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(double(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    magnitude = std::ldexp(double(mantissa + 1024), exponent - 25);
  }
  return (bits & 0x8000) ? -magnitude : magnitude;
}

}  // namespace rlinks
