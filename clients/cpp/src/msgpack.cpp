#include "rlinks/msgpack.hpp"

#include <cstring>
#include <string>
#include <string_view>

#include "rlinks/errors.hpp"

namespace rlinks::msgpack {
namespace {

// msgpack-numpy's keys, which are bin.
constexpr std::string_view kNd = "nd";
constexpr std::string_view kType = "type";
constexpr std::string_view kKind = "kind";
constexpr std::string_view kShape = "shape";
constexpr std::string_view kData = "data";

// Entries reserved up front at most; a header's count is only a claim.
constexpr size_t kMaxReserve = 1024;

ProtocolError bad_body(const std::string& why) {
  return ProtocolError(ErrorCode::bad_body, "body is not valid msgpack: " + why);
}

bool is_bin_key(const Value& key, std::string_view name) {
  if (!key.is_bin()) return false;
  const Bytes& bytes = key.as_bin();
  return bytes.size() == name.size() && std::memcmp(bytes.data(), name.data(), name.size()) == 0;
}

const Value* find_bin_key(const Map& entries, std::string_view name) {
  for (auto entry = entries.rbegin(); entry != entries.rend(); ++entry) {
    if (is_bin_key(entry->key, name)) return &entry->value;
  }
  return nullptr;
}

bool valid_utf8(const uint8_t* text, size_t size) {
  size_t i = 0;
  while (i < size) {
    const uint8_t lead = text[i];
    size_t extra;
    uint8_t low = 0x80, high = 0xbf;  // bounds of the first continuation byte
    if (lead < 0x80) {
      ++i;
      continue;
    } else if (lead >= 0xc2 && lead <= 0xdf) {
      extra = 1;
    } else if (lead >= 0xe0 && lead <= 0xef) {
      extra = 2;
      if (lead == 0xe0) low = 0xa0;
      if (lead == 0xed) high = 0x9f;  // no UTF-16 surrogates
    } else if (lead >= 0xf0 && lead <= 0xf4) {
      extra = 3;
      if (lead == 0xf0) low = 0x90;
      if (lead == 0xf4) high = 0x8f;
    } else {
      return false;
    }
    if (size - i <= extra) return false;
    if (text[i + 1] < low || text[i + 1] > high) return false;
    for (size_t k = 2; k <= extra; ++k) {
      if ((text[i + k] & 0xc0) != 0x80) return false;
    }
    i += extra + 1;
  }
  return true;
}

class Reader {
 public:
  explicit Reader(std::shared_ptr<const Bytes> body)
      : body_(std::move(body)), begin_(body_->data()), pos_(begin_), end_(begin_ + body_->size()) {}

  Value read(size_t depth) {
    const uint8_t first = *take(1);
    if (first <= 0x7f) return Value(first);
    if (first >= 0xe0) return Value(int8_t(first));
    if (first <= 0x8f) return read_map(first & 0x0f, depth);
    if (first <= 0x9f) return read_array(first & 0x0f, depth);
    if (first <= 0xbf) return read_str(first & 0x1f);
    switch (first) {
      case 0xc0: return Value();
      case 0xc2: return Value(false);
      case 0xc3: return Value(true);
      case 0xc4: return read_bin(size_t(big_endian(1)));
      case 0xc5: return read_bin(size_t(big_endian(2)));
      case 0xc6: return read_bin(size_t(big_endian(4)));
      case 0xca: {
        const uint32_t bits = uint32_t(big_endian(4));
        float value;
        std::memcpy(&value, &bits, 4);
        return Value(double(value));
      }
      case 0xcb: {
        const uint64_t bits = big_endian(8);
        double value;
        std::memcpy(&value, &bits, 8);
        return Value(value);
      }
      case 0xcc: return Value(uint8_t(big_endian(1)));
      case 0xcd: return Value(uint16_t(big_endian(2)));
      case 0xce: return Value(uint32_t(big_endian(4)));
      case 0xcf: return Value(uint64_t(big_endian(8)));
      case 0xd0: return Value(int8_t(big_endian(1)));
      case 0xd1: return Value(int16_t(big_endian(2)));
      case 0xd2: return Value(int32_t(big_endian(4)));
      case 0xd3: return Value(int64_t(big_endian(8)));
      case 0xd9: return read_str(size_t(big_endian(1)));
      case 0xda: return read_str(size_t(big_endian(2)));
      case 0xdb: return read_str(size_t(big_endian(4)));
      case 0xdc: return read_array(size_t(big_endian(2)), depth);
      case 0xdd: return read_array(size_t(big_endian(4)), depth);
      case 0xde: return read_map(size_t(big_endian(2)), depth);
      case 0xdf: return read_map(size_t(big_endian(4)), depth);
      case 0xc7:
      case 0xc8:
      case 0xc9:
      case 0xd4:
      case 0xd5:
      case 0xd6:
      case 0xd7:
      case 0xd8:
        throw ProtocolError(ErrorCode::bad_body, "msgpack extension types are not part of RLlink");
      default: throw bad_body("byte 0xc1 starts no value");
    }
  }

  size_t left() const { return size_t(end_ - pos_); }

 private:
  const uint8_t* take(size_t size) {
    if (size > left()) throw bad_body("truncated");
    const uint8_t* start = pos_;
    pos_ += size;
    return start;
  }

  uint64_t big_endian(size_t width) {
    const uint8_t* bytes = take(width);
    uint64_t value = 0;
    for (size_t i = 0; i < width; ++i) value = (value << 8) | bytes[i];
    return value;
  }

  Value read_str(size_t size) {
    const uint8_t* text = take(size);
    if (!valid_utf8(text, size)) throw bad_body("a str is not valid UTF-8");
    return Value(std::string(reinterpret_cast<const char*>(text), size));
  }

  Value read_bin(size_t size) {
    const uint8_t* bytes = take(size);
    return Value(Bin{Bytes(bytes, bytes + size)});
  }

  Value read_array(size_t count, size_t depth) {
    if (depth >= kMaxDepth) throw bad_body("nested deeper than " + std::to_string(kMaxDepth) + " levels");
    if (count > left()) throw bad_body("truncated");
    Array items;
    items.reserve(std::min(count, kMaxReserve));
    for (size_t i = 0; i < count; ++i) items.push_back(read(depth + 1));
    return Value(std::move(items));
  }

  Value read_map(size_t count, size_t depth) {
    if (depth >= kMaxDepth) throw bad_body("nested deeper than " + std::to_string(kMaxDepth) + " levels");
    if (count > left() / 2) throw bad_body("truncated");
    Map entries;
    entries.reserve(std::min(count, kMaxReserve));
    // Where each bin value starts, so an array map's data can be a view of the body.
    const uint8_t* data_start = nullptr;
    for (size_t i = 0; i < count; ++i) {
      Value key = read(depth + 1);
      if (key.is_array() || key.is_map() || key.is_ndarray()) throw bad_body("a map key must be a scalar");
      Value value = read(depth + 1);
      if (is_bin_key(key, kData) && value.is_bin()) data_start = pos_ - value.as_bin().size();
      entries.push_back({std::move(key), std::move(value)});
    }
    if (find_bin_key(entries, kNd) != nullptr) return array_from_map(entries, data_start);
    return Value(std::move(entries));
  }

  // msgpack-numpy's map -> NdArray, refusing what would need pickle.
  Value array_from_map(const Map& entries, const uint8_t* data_start) {
    const Value& nd = *find_bin_key(entries, kNd);
    const Value* kind = find_bin_key(entries, kKind);
    if (kind != nullptr) {
      if (!kind->is_bin() && !kind->is_str()) throw ProtocolError(ErrorCode::bad_body, "unknown array kind");
      const std::string text = kind->is_str() ? kind->as_str() : std::string(kind->as_bin().begin(), kind->as_bin().end());
      if (text == "O") {
        throw ProtocolError(ErrorCode::unsafe_payload, "object arrays are refused: msgpack-numpy would unpickle them");
      }
      if (text == "V") throw ProtocolError(ErrorCode::unsafe_payload, "structured (kind 'V') arrays are refused");
      if (!text.empty()) throw ProtocolError(ErrorCode::bad_body, "unknown array kind '" + text.substr(0, 16) + "'");
    }
    const Value* data = find_bin_key(entries, kData);
    if (data == nullptr || !data->is_bin()) {
      throw ProtocolError(ErrorCode::bad_body,
                          std::string("array data must be bin, got ") + (data ? data->type_name() : "nothing"));
    }
    const Value* type = find_bin_key(entries, kType);
    if (type == nullptr || !type->is_str()) {
      throw ProtocolError(ErrorCode::unsafe_payload, "array dtype must be a dtype string");
    }
    const DType dtype = DType::parse(type->as_str());
    const size_t length = data->as_bin().size();
    const size_t offset = size_t(data_start - begin_);

    if (nd.is_bool() && !nd.as_bool()) {
      if (entries.size() > 3 + (kind != nullptr ? 1 : 0)) {
        throw ProtocolError(ErrorCode::bad_body, "unexpected keys in numpy scalar");
      }
      if (length != dtype.item_size) {
        throw ProtocolError(ErrorCode::bad_body, "numpy scalar of " + dtype.str() + " needs " +
                                                     std::to_string(dtype.item_size) + " bytes, got " +
                                                     std::to_string(length));
      }
      return Value(NdArray::view(dtype, {}, true, body_, offset, length));
    }
    if (!nd.is_bool()) throw ProtocolError(ErrorCode::bad_body, "array map's 'nd' must be true or false");

    const Value* shape_value = find_bin_key(entries, kShape);
    if (shape_value == nullptr || !shape_value->is_array()) {
      throw ProtocolError(ErrorCode::bad_body, "array shape must be a list of ints");
    }
    std::vector<uint64_t> shape;
    for (const Value& dim : shape_value->as_array()) {
      uint64_t size;
      if (!dim.get_uint64(size)) throw ProtocolError(ErrorCode::bad_body, "array shape must be non-negative ints");
      shape.push_back(size);
    }
    bool overflow = false;
    const uint64_t count = element_count(shape, overflow);
    if (overflow || (dtype.item_size != 0 && count > length / dtype.item_size) || count * dtype.item_size != length) {
      throw ProtocolError(ErrorCode::bad_body, "array of dtype " + dtype.str() + " and its shape needs another length than the " +
                                                   std::to_string(length) + " bytes of its data");
    }
    return Value(NdArray::view(dtype, std::move(shape), false, body_, offset, length));
  }

  std::shared_ptr<const Bytes> body_;
  const uint8_t* begin_;
  const uint8_t* pos_;
  const uint8_t* end_;
};

void put_byte(Bytes& out, uint8_t byte) { out.push_back(byte); }

void put_big_endian(Bytes& out, uint64_t value, size_t width) {
  for (size_t i = width; i-- > 0;) out.push_back(uint8_t(value >> (8 * i)));
}

void put_length(Bytes& out, size_t size, uint8_t fix_base, size_t fix_limit, uint8_t op8, uint8_t op16, uint8_t op32) {
  if (size < fix_limit) {
    put_byte(out, uint8_t(fix_base | size));
  } else if (op8 != 0 && size <= 0xff) {
    put_byte(out, op8);
    put_big_endian(out, size, 1);
  } else if (size <= 0xffff) {
    put_byte(out, op16);
    put_big_endian(out, size, 2);
  } else if (uint64_t(size) <= 0xffffffffu) {
    put_byte(out, op32);
    put_big_endian(out, size, 4);
  } else {
    throw UsageError("a msgpack str, bin, array or map may hold at most 2^32-1 items");
  }
}

void put_str(Bytes& out, std::string_view text) {
  put_length(out, text.size(), 0xa0, 32, 0xd9, 0xda, 0xdb);
  out.insert(out.end(), text.begin(), text.end());
}

void put_bin(Bytes& out, const uint8_t* bytes, size_t size) {
  put_length(out, size, 0, 0, 0xc4, 0xc5, 0xc6);
  out.insert(out.end(), bytes, bytes + size);
}

void put_bin_key(Bytes& out, std::string_view name) {
  put_bin(out, reinterpret_cast<const uint8_t*>(name.data()), name.size());
}

void put_integer(Bytes& out, const Integer& number) {
  if (!number.negative) {
    const uint64_t value = number.bits;
    if (value <= 0x7f) return put_byte(out, uint8_t(value));
    if (value <= 0xff) return put_byte(out, 0xcc), put_big_endian(out, value, 1);
    if (value <= 0xffff) return put_byte(out, 0xcd), put_big_endian(out, value, 2);
    if (value <= 0xffffffffu) return put_byte(out, 0xce), put_big_endian(out, value, 4);
    return put_byte(out, 0xcf), put_big_endian(out, value, 8);
  }
  const int64_t value = int64_t(number.bits);
  if (value >= -32) return put_byte(out, uint8_t(value));
  if (value >= -128) return put_byte(out, 0xd0), put_big_endian(out, uint64_t(value), 1);
  if (value >= -32768) return put_byte(out, 0xd1), put_big_endian(out, uint64_t(value), 2);
  if (value >= -2147483648LL) return put_byte(out, 0xd2), put_big_endian(out, uint64_t(value), 4);
  return put_byte(out, 0xd3), put_big_endian(out, uint64_t(value), 8);
}

void put_ndarray(Bytes& out, const NdArray& array) {
  put_length(out, array.is_scalar() ? 3 : 5, 0x80, 16, 0, 0xde, 0xdf);
  put_bin_key(out, kNd);
  put_byte(out, array.is_scalar() ? 0xc2 : 0xc3);
  put_bin_key(out, kType);
  put_str(out, array.dtype().str());
  if (!array.is_scalar()) {
    put_bin_key(out, kKind);
    put_bin(out, nullptr, 0);
    put_bin_key(out, kShape);
    put_length(out, array.shape().size(), 0x90, 16, 0, 0xdc, 0xdd);
    for (uint64_t dim : array.shape()) put_integer(out, Integer{false, dim});
  }
  put_bin_key(out, kData);
  put_bin(out, array.data(), array.nbytes());
}

}  // namespace

Value decode(std::shared_ptr<const Bytes> body) {
  Reader reader(std::move(body));
  Value value = reader.read(0);
  if (reader.left() != 0) throw bad_body(std::to_string(reader.left()) + " bytes after the value");
  return value;
}

Value decode(const uint8_t* data, size_t size) {
  return decode(std::make_shared<const Bytes>(data, data + size));
}

void encode(const Value& value, Bytes& out) {
  switch (value.type()) {
    case Value::Type::nil: return put_byte(out, 0xc0);
    case Value::Type::boolean: return put_byte(out, value.as_bool() ? 0xc3 : 0xc2);
    case Value::Type::integer: return put_integer(out, value.integer());
    case Value::Type::floating: {
      const double number = value.as_double();
      uint64_t bits;
      std::memcpy(&bits, &number, 8);
      put_byte(out, 0xcb);
      return put_big_endian(out, bits, 8);
    }
    case Value::Type::str: return put_str(out, value.as_str());
    case Value::Type::bin: return put_bin(out, value.as_bin().data(), value.as_bin().size());
    case Value::Type::array:
      put_length(out, value.as_array().size(), 0x90, 16, 0, 0xdc, 0xdd);
      for (const Value& item : value.as_array()) encode(item, out);
      return;
    case Value::Type::map:
      put_length(out, value.as_map().size(), 0x80, 16, 0, 0xde, 0xdf);
      for (const MapEntry& entry : value.as_map()) {
        encode(entry.key, out);
        encode(entry.value, out);
      }
      return;
    case Value::Type::ndarray: return put_ndarray(out, value.as_ndarray());
  }
}

Bytes encode(const Value& value) {
  Bytes out;
  encode(value, out);
  return out;
}

}  // namespace rlinks::msgpack
