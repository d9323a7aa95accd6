// One msgpack value as RLlink uses it (PROTOCOL.md section 3), with
// msgpack-numpy's array and scalar maps held as NdArray (section 4).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "rlinks/ndarray.hpp"

namespace rlinks {

class Value;
struct MapEntry;
using Array = std::vector<Value>;
using Map = std::vector<MapEntry>;  // in wire order

// msgpack bin (bytes), as opposed to str (text).
struct Bin {
  Bytes bytes;
  bool operator==(const Bin& other) const { return bytes == other.bytes; }
};

// An integer in msgpack's range, -2^63 .. 2^64-1.
struct Integer {
  bool negative = false;
  uint64_t bits = 0;  // the value, or its two's complement when negative

  bool operator==(const Integer& other) const { return negative == other.negative && bits == other.bits; }
};

class Value {
 public:
  enum class Type { nil, boolean, integer, floating, str, bin, array, map, ndarray };

  Value() = default;
  Value(std::nullptr_t) {}
  Value(bool value) : data_(value) {}
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Value(T value) : data_(to_integer(value)) {}
  Value(double value) : data_(value) {}
  Value(const char* text) : data_(std::string(text)) {}
  Value(std::string text) : data_(std::move(text)) {}
  Value(std::string_view text) : data_(std::string(text)) {}
  Value(Bin bytes) : data_(std::move(bytes)) {}
  Value(Array items) : data_(std::move(items)) {}
  Value(Map entries) : data_(std::move(entries)) {}
  Value(NdArray array) : data_(std::make_shared<const NdArray>(std::move(array))) {}

  Type type() const { return Type(data_.index()); }
  bool is_nil() const { return type() == Type::nil; }
  bool is_bool() const { return type() == Type::boolean; }
  bool is_integer() const { return type() == Type::integer; }
  bool is_float() const { return type() == Type::floating; }
  bool is_str() const { return type() == Type::str; }
  bool is_bin() const { return type() == Type::bin; }
  bool is_array() const { return type() == Type::array; }
  bool is_map() const { return type() == Type::map; }
  bool is_ndarray() const { return type() == Type::ndarray; }
  // A msgpack integer >= 0 (never a bool): what PROTOCOL.md calls an *int* field.
  bool is_count() const { return is_integer() && !integer().negative; }

  // Accessors of the held type; asking for another type is a bug (std::bad_variant_access).
  bool as_bool() const { return std::get<bool>(data_); }
  const Integer& integer() const { return std::get<Integer>(data_); }
  double as_double() const { return std::get<double>(data_); }
  const std::string& as_str() const { return std::get<std::string>(data_); }
  const Bytes& as_bin() const { return std::get<Bin>(data_).bytes; }
  const Array& as_array() const { return std::get<Array>(data_); }
  Array& as_array() { return std::get<Array>(data_); }
  const Map& as_map() const { return std::get<Map>(data_); }
  Map& as_map() { return std::get<Map>(data_); }
  const NdArray& as_ndarray() const { return *std::get<std::shared_ptr<const NdArray>>(data_); }

  // The integer, if it is one and fits.
  bool get_int64(int64_t& out) const;
  bool get_uint64(uint64_t& out) const;

  // The value under str key `key` of a map (the last one, if repeated, as a
  // Python dict keeps it); nullptr when absent or when this is not a map.
  const Value* find(std::string_view key) const;
  // Sets str key `key` of a map, replacing a value already there.
  void set(std::string_view key, Value value);

  // The msgpack family's name, for error messages: "map", "str", "int", ...
  const char* type_name() const;

  bool operator==(const Value& other) const;
  bool operator!=(const Value& other) const { return !(*this == other); }

 private:
  template <class T>
  static Integer to_integer(T value) {
    if constexpr (std::is_signed_v<T>) {
      return Integer{value < 0, uint64_t(int64_t(value))};
    } else {
      return Integer{false, uint64_t(value)};
    }
  }

  std::variant<std::monostate, bool, Integer, double, std::string, Bin, Array, Map, std::shared_ptr<const NdArray>>
      data_;
};

struct MapEntry {
  Value key;
  Value value;
  bool operator==(const MapEntry& other) const { return key == other.key && value == other.value; }
};

}  // namespace rlinks
