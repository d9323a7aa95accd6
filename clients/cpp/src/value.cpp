#include "rlinks/value.hpp"

#include <cstring>
#include <limits>

namespace rlinks {

bool Value::get_int64(int64_t& out) const {
  if (!is_integer()) return false;
  const Integer& number = integer();
  if (!number.negative && number.bits > uint64_t(std::numeric_limits<int64_t>::max())) return false;
  out = int64_t(number.bits);
  return true;
}

bool Value::get_uint64(uint64_t& out) const {
  if (!is_count()) return false;
  out = integer().bits;
  return true;
}

const Value* Value::find(std::string_view key) const {
  if (!is_map()) return nullptr;
  const Map& entries = as_map();
  for (auto entry = entries.rbegin(); entry != entries.rend(); ++entry) {
    if (entry->key.is_str() && entry->key.as_str() == key) return &entry->value;
  }
  return nullptr;
}

void Value::set(std::string_view key, Value value) {
  Map& entries = as_map();
  for (auto entry = entries.rbegin(); entry != entries.rend(); ++entry) {
    if (entry->key.is_str() && entry->key.as_str() == key) {
      entry->value = std::move(value);
      return;
    }
  }
  entries.push_back({Value(key), std::move(value)});
}

const char* Value::type_name() const {
  switch (type()) {
    case Type::nil: return "nil";
    case Type::boolean: return "bool";
    case Type::integer: return "int";
    case Type::floating: return "float";
    case Type::str: return "str";
    case Type::bin: return "bin";
    case Type::array: return "list";
    case Type::map: return "map";
    case Type::ndarray: return as_ndarray().is_scalar() ? "numpy scalar" : "numpy array";
  }
  return "?";
}

bool Value::operator==(const Value& other) const {
  if (type() != other.type()) return false;
  switch (type()) {
    case Type::floating: {
      const double a = as_double(), b = other.as_double();
      return std::memcmp(&a, &b, sizeof a) == 0;  // -0.0 differs from 0.0, and a NaN equals itself
    }
    case Type::ndarray: return as_ndarray() == other.as_ndarray();
    default: return data_ == other.data_;
  }
}

}  // namespace rlinks
