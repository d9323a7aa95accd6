// A minimal JSON reader for the test vectors' .json files (tests only).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace testjson {

struct Json {
  enum class Kind { null, boolean, number, string, array, object };

  Kind kind = Kind::null;
  bool boolean = false;
  std::string text;  // a string's contents, or a number's token as written
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;  // in the file's order

  // Whether a number was written as a float ("1.0", "1e+300", "NaN"), not an int.
  bool is_float_token() const;
  const Json* get(std::string_view key) const;
};

// Throws std::runtime_error naming the offset of a syntax error.
Json parse(std::string_view text);

}  // namespace testjson
