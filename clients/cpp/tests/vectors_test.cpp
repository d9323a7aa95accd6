// Replays every case of tests/vectors/ (format: tests/vectors/README.md)
// through the C++ frame decoder and encoder.
//
// Each valid case must decode to the messages its JSON lists, fed one byte at
// a time, all at once, and cut in two (at every byte of a short stream);
// canonical ones must encode back to exactly the .bin bytes, both from the
// JSON and from what was decoded. Each invalid case must fail with the JSON's error code, at feed or
// at eof as it says, after the messages it lists.
//
// Usage: vectors_test VECTORS_DIR   (prints "N passed, M failed")

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "json.hpp"
#include "rlinks/errors.hpp"
#include "rlinks/framing.hpp"
#include "rlinks/msgpack.hpp"

namespace fs = std::filesystem;
using rlinks::Bytes;
using rlinks::NdArray;
using rlinks::Value;
using testjson::Json;

namespace {

struct Outcome {
  std::vector<Value> messages;
  std::string error_code;  // empty: no error
  std::string when;        // "feed" or "eof"
};

// Feeds `stream` in pieces ending at each of `cuts` (and at its end), then ends it.
Outcome replay(const Bytes& stream, uint32_t max_frame_bytes, const std::vector<size_t>& cuts) {
  Outcome outcome;
  rlinks::FrameDecoder decoder(max_frame_bytes);
  size_t start = 0;
  try {
    for (size_t cut : cuts) {
      decoder.feed(stream.data() + start, cut - start, outcome.messages);
      start = cut;
    }
    decoder.feed(stream.data() + start, stream.size() - start, outcome.messages);
  } catch (const rlinks::ProtocolError& error) {
    outcome.error_code = rlinks::to_string(error.code());
    outcome.when = "feed";
    return outcome;
  }
  try {
    decoder.eof();
  } catch (const rlinks::ProtocolError& error) {
    outcome.error_code = rlinks::to_string(error.code());
    outcome.when = "eof";
  }
  return outcome;
}

Bytes read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string hex(const Bytes& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (uint8_t byte : bytes) {
    out += digits[byte >> 4];
    out += digits[byte & 15];
  }
  return out;
}

bool same_double(double expected, double actual) {
  if (std::isnan(expected)) return std::isnan(actual);
  return std::memcmp(&expected, &actual, sizeof expected) == 0;
}

double json_double(const Json& number) { return std::strtod(number.text.c_str(), nullptr); }

// "" when `actual` is what `expected` (a JSON meaning) says; else why not.
std::string compare(const Json& expected, const Value& actual, const std::string& path);

std::string mismatch(const std::string& path, const std::string& what) { return path + ": " + what; }

std::string compare_element(const Json& expected, const NdArray& array, size_t i, const std::string& path) {
  const char kind = array.dtype().kind;
  const std::string where = path + "[" + std::to_string(i) + "]";
  switch (kind) {
    case 'b':
      if (expected.kind != Json::Kind::boolean || expected.boolean != (array.number(i) != 0)) {
        return mismatch(where, "bool element differs");
      }
      return "";
    case 'i':
      if (expected.kind != Json::Kind::number || std::strtoll(expected.text.c_str(), nullptr, 10) != array.signed_at(i)) {
        return mismatch(where, "int element differs: expected " + expected.text);
      }
      return "";
    case 'u':
      if (expected.kind != Json::Kind::number ||
          std::strtoull(expected.text.c_str(), nullptr, 10) != array.unsigned_at(i)) {
        return mismatch(where, "uint element differs: expected " + expected.text);
      }
      return "";
    case 'f':
      if (expected.kind != Json::Kind::number || !same_double(json_double(expected), array.number(i))) {
        return mismatch(where, "float element differs: expected " + expected.text);
      }
      return "";
    case 'c': {
      const auto [real, imag] = array.complex_at(i);
      if (expected.kind != Json::Kind::array || expected.items.size() != 2 ||
          !same_double(json_double(expected.items[0]), real) || !same_double(json_double(expected.items[1]), imag)) {
        return mismatch(where, "complex element differs");
      }
      return "";
    }
    default: return mismatch(where, std::string("this test does not compare dtype kind ") + kind);
  }
}

std::string compare_array(const Json& spec, const Value& actual, bool scalar, const std::string& path) {
  if (!actual.is_ndarray() || actual.as_ndarray().is_scalar() != scalar) {
    return mismatch(path, std::string("expected a numpy ") + (scalar ? "scalar" : "array") + ", got " + actual.type_name());
  }
  const NdArray& array = actual.as_ndarray();
  const Json* dtype = spec.get("dtype");
  if (dtype == nullptr || dtype->text != array.dtype().str()) {
    return mismatch(path, "dtype " + array.dtype().str() + " differs");
  }
  const Json* data = spec.get("data");
  if (scalar) return data == nullptr ? mismatch(path, "no data") : compare_element(*data, array, 0, path);
  const Json* shape = spec.get("shape");
  std::vector<uint64_t> expected_shape;
  for (const Json& dim : shape->items) expected_shape.push_back(std::strtoull(dim.text.c_str(), nullptr, 10));
  if (expected_shape != array.shape()) return mismatch(path, "shape differs");
  if (data->items.size() != array.size()) return mismatch(path, "element count differs");
  for (size_t i = 0; i < array.size(); ++i) {
    std::string why = compare_element(data->items[i], array, i, path);
    if (!why.empty()) return why;
  }
  return "";
}

std::string compare(const Json& expected, const Value& actual, const std::string& path) {
  switch (expected.kind) {
    case Json::Kind::null: return actual.is_nil() ? "" : mismatch(path, std::string("expected nil, got ") + actual.type_name());
    case Json::Kind::boolean:
      return actual.is_bool() && actual.as_bool() == expected.boolean ? "" : mismatch(path, "bool differs");
    case Json::Kind::number: {
      if (expected.is_float_token()) {
        return actual.is_float() && same_double(json_double(expected), actual.as_double())
                   ? ""
                   : mismatch(path, "expected float " + expected.text);
      }
      if (!actual.is_integer()) return mismatch(path, std::string("expected int, got ") + actual.type_name());
      const bool negative = expected.text[0] == '-';
      const uint64_t bits = negative ? uint64_t(std::strtoll(expected.text.c_str(), nullptr, 10))
                                     : std::strtoull(expected.text.c_str(), nullptr, 10);
      return actual.integer() == rlinks::Integer{negative, bits} ? "" : mismatch(path, "expected int " + expected.text);
    }
    case Json::Kind::string:
      return actual.is_str() && actual.as_str() == expected.text ? "" : mismatch(path, "str differs");
    case Json::Kind::array: {
      if (!actual.is_array() || actual.as_array().size() != expected.items.size()) {
        return mismatch(path, "list differs in type or length");
      }
      for (size_t i = 0; i < expected.items.size(); ++i) {
        std::string why = compare(expected.items[i], actual.as_array()[i], path + "[" + std::to_string(i) + "]");
        if (!why.empty()) return why;
      }
      return "";
    }
    case Json::Kind::object: {
      if (expected.members.size() == 1 && expected.members[0].first[0] == '$') {
        const auto& [tag, spec] = expected.members[0];
        if (tag == "$bytes") {
          return actual.is_bin() && hex(actual.as_bin()) == spec.text ? "" : mismatch(path, "bytes differ");
        }
        if (tag == "$ndarray") return compare_array(spec, actual, false, path);
        if (tag == "$scalar") return compare_array(spec, actual, true, path);
        return mismatch(path, "unknown tag " + tag);
      }
      if (!actual.is_map() || actual.as_map().size() != expected.members.size()) {
        return mismatch(path, "map differs in type or size");
      }
      for (size_t i = 0; i < expected.members.size(); ++i) {
        const rlinks::MapEntry& entry = actual.as_map()[i];
        const auto& [key, value] = expected.members[i];
        if (!entry.key.is_str() || entry.key.as_str() != key) return mismatch(path, "key #" + std::to_string(i) + " differs");
        std::string why = compare(value, entry.value, path + "." + key);
        if (!why.empty()) return why;
      }
      return "";
    }
  }
  return mismatch(path, "?");
}

std::string compare_messages(const Json& expected, const std::vector<Value>& actual, const std::string& mode) {
  if (expected.items.size() != actual.size()) {
    return mode + ": " + std::to_string(actual.size()) + " messages, expected " + std::to_string(expected.items.size());
  }
  for (size_t i = 0; i < actual.size(); ++i) {
    std::string why = compare(expected.items[i], actual[i], mode + ": message[" + std::to_string(i) + "]");
    if (!why.empty()) return why;
  }
  return "";
}

// The value a JSON meaning stands for, to encode it again.
Value from_json(const Json& json);

Value array_from_json(const Json& spec, bool scalar) {
  const rlinks::DType dtype = rlinks::DType::parse(spec.get("dtype")->text);
  std::vector<uint64_t> shape;
  std::vector<const Json*> elements;
  if (scalar) {
    elements.push_back(spec.get("data"));
  } else {
    for (const Json& dim : spec.get("shape")->items) shape.push_back(std::strtoull(dim.text.c_str(), nullptr, 10));
    for (const Json& element : spec.get("data")->items) elements.push_back(&element);
  }
  Bytes data(elements.size() * dtype.item_size);
  for (size_t i = 0; i < elements.size(); ++i) {
    const Json& element = *elements[i];
    uint8_t* out = data.data() + i * dtype.item_size;
    if (dtype.kind == 'c') {
      rlinks::store_complex(dtype, out, json_double(element.items[0]), json_double(element.items[1]));
    } else if (element.kind == Json::Kind::boolean) {
      rlinks::store_unsigned(dtype, out, element.boolean ? 1 : 0);
    } else if (dtype.kind == 'f' || element.is_float_token()) {
      rlinks::store_number(dtype, out, json_double(element));
    } else if (element.text[0] == '-') {
      rlinks::store_signed(dtype, out, std::strtoll(element.text.c_str(), nullptr, 10));
    } else {
      rlinks::store_unsigned(dtype, out, std::strtoull(element.text.c_str(), nullptr, 10));
    }
  }
  return scalar ? Value(NdArray::scalar(dtype, std::move(data))) : Value(NdArray(dtype, std::move(shape), std::move(data)));
}

Bytes unhex(const std::string& text) {
  Bytes out;
  for (size_t i = 0; i + 1 < text.size(); i += 2) out.push_back(uint8_t(std::stoul(text.substr(i, 2), nullptr, 16)));
  return out;
}

Value from_json(const Json& json) {
  switch (json.kind) {
    case Json::Kind::null: return Value();
    case Json::Kind::boolean: return Value(json.boolean);
    case Json::Kind::number:
      if (json.is_float_token()) return Value(json_double(json));
      if (json.text[0] == '-') return Value(int64_t(std::strtoll(json.text.c_str(), nullptr, 10)));
      return Value(uint64_t(std::strtoull(json.text.c_str(), nullptr, 10)));
    case Json::Kind::string: return Value(json.text);
    case Json::Kind::array: {
      rlinks::Array items;
      for (const Json& item : json.items) items.push_back(from_json(item));
      return Value(std::move(items));
    }
    case Json::Kind::object: {
      if (json.members.size() == 1 && json.members[0].first[0] == '$') {
        const auto& [tag, spec] = json.members[0];
        if (tag == "$bytes") return Value(rlinks::Bin{unhex(spec.text)});
        return array_from_json(spec, tag == "$scalar");
      }
      rlinks::Map entries;
      for (const auto& [key, value] : json.members) entries.push_back({Value(key), from_json(value)});
      return Value(std::move(entries));
    }
  }
  return Value();
}

Bytes encode_all(const std::vector<Value>& messages) {
  Bytes out;
  for (const Value& message : messages) {
    Bytes frame = rlinks::encode_frame(message);
    out.insert(out.end(), frame.begin(), frame.end());
  }
  return out;
}

// "" if the case passes; else the first reason it does not.
std::string check_case(const Json& spec, const Bytes& stream) {
  const uint32_t max_frame_bytes = uint32_t(std::strtoul(spec.get("max_frame_bytes")->text.c_str(), nullptr, 10));
  const Json& expected = *spec.get("messages");
  const Json& error = *spec.get("error");
  const std::string expected_code = error.kind == Json::Kind::null ? "" : error.get("code")->text;
  const std::string expected_when = error.kind == Json::Kind::null ? "" : error.get("when")->text;

  std::vector<std::pair<std::string, std::vector<size_t>>> modes;
  std::vector<size_t> every_byte;
  for (size_t i = 1; i < stream.size(); ++i) every_byte.push_back(i);
  modes.emplace_back("byte by byte", every_byte);
  modes.emplace_back("in one piece", std::vector<size_t>{});
  // Every cut of a short stream; about kMaxCuts spread over a long one, every
  // byte of its header included.
  constexpr size_t kMaxCuts = 512;
  const size_t stride = stream.size() <= kMaxCuts ? 1 : stream.size() / kMaxCuts + 1;
  for (size_t cut = 1; cut < stream.size(); cut += (cut < rlinks::kHeaderBytes + 2 ? 1 : stride)) {
    modes.emplace_back("cut at " + std::to_string(cut), std::vector<size_t>{cut});
  }

  // The first mode is checked against the JSON; the others, cheaper, against the first's messages.
  std::vector<Value> reference;
  for (const auto& [mode, cuts] : modes) {
    const Outcome outcome = replay(stream, max_frame_bytes, cuts);
    if (outcome.error_code != expected_code || outcome.when != expected_when) {
      return mode + ": error '" + outcome.error_code + "' at '" + outcome.when + "', expected '" + expected_code +
             "' at '" + expected_when + "'";
    }
    if (&mode == &modes.front().first) {
      std::string why = compare_messages(expected, outcome.messages, mode);
      if (!why.empty()) return why;
      reference = outcome.messages;
    } else if (outcome.messages != reference) {
      return mode + ": the messages differ from those decoded byte by byte";
    }
  }

  const Json* canonical = spec.get("canonical");
  if (canonical != nullptr && canonical->boolean) {
    std::vector<Value> from_spec;
    for (const Json& message : expected.items) from_spec.push_back(from_json(message));
    if (encode_all(from_spec) != stream) return "encoding the JSON's messages does not give the .bin bytes";
    if (encode_all(replay(stream, max_frame_bytes, {}).messages) != stream) {
      return "encoding the decoded messages does not give the .bin bytes";
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: vectors_test VECTORS_DIR\n";
    return 2;
  }
  std::vector<fs::path> specs;
  for (const auto& entry : fs::directory_iterator(argv[1])) {
    if (entry.path().extension() == ".json") specs.push_back(entry.path());
  }
  std::sort(specs.begin(), specs.end());
  int passed = 0, failed = 0;
  for (const fs::path& path : specs) {
    const std::string name = path.stem().string();
    std::string why;
    try {
      const Bytes text = read_file(path);
      const Json spec = testjson::parse(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()));
      fs::path bin = path;
      bin.replace_extension(".bin");
      if (!fs::exists(bin)) {
        why = "no " + bin.filename().string();
      } else {
        why = check_case(spec, read_file(bin));
      }
    } catch (const std::exception& exc) {
      why = std::string("exception: ") + exc.what();
    }
    if (why.empty()) {
      ++passed;
    } else {
      ++failed;
      std::cout << "FAIL " << name << ": " << why << "\n";
    }
  }
  std::cout << passed << " passed, " << failed << " failed\n";
  return failed == 0 && passed > 0 ? 0 : 1;
}
