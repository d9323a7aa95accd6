#include "json.hpp"

#include <stdexcept>

namespace testjson {
namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Json document() {
    Json value = parse_value();
    skip_space();
    if (pos_ != text_.size()) fail("trailing characters");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error("JSON: " + why + " at offset " + std::to_string(pos_));
  }

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\r' || text_[pos_] == '\t')) {
      ++pos_;
    }
  }

  bool consume(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Json parse_value() {
    skip_space();
    if (pos_ >= text_.size()) fail("unexpected end");
    Json value;
    const char c = text_[pos_];
    if (c == '{') return parse_object();
    if (c == '[') return parse_array();
    if (c == '"') {
      value.kind = Json::Kind::string;
      value.text = parse_string();
    } else if (consume("null")) {
      value.kind = Json::Kind::null;
    } else if (consume("true")) {
      value.kind = Json::Kind::boolean;
      value.boolean = true;
    } else if (consume("false")) {
      value.kind = Json::Kind::boolean;
    } else {
      value.kind = Json::Kind::number;
      value.text = parse_number();
    }
    return value;
  }

  std::string parse_number() {
    for (std::string_view word : {"NaN", "Infinity", "-Infinity"}) {
      if (consume(word)) return std::string(word);
    }
    const size_t start = pos_;
    while (pos_ < text_.size() && std::string_view("+-0123456789.eE").find(text_[pos_]) != std::string_view::npos) {
      ++pos_;
    }
    if (pos_ == start) fail("unexpected character");
    return std::string(text_.substr(start, pos_ - start));
  }

  static void append_utf8(std::string& out, uint32_t code) {
    if (code < 0x80) {
      out += char(code);
    } else if (code < 0x800) {
      out += char(0xc0 | (code >> 6));
      out += char(0x80 | (code & 0x3f));
    } else if (code < 0x10000) {
      out += char(0xe0 | (code >> 12));
      out += char(0x80 | ((code >> 6) & 0x3f));
      out += char(0x80 | (code & 0x3f));
    } else {
      out += char(0xf0 | (code >> 18));
      out += char(0x80 | ((code >> 12) & 0x3f));
      out += char(0x80 | ((code >> 6) & 0x3f));
      out += char(0x80 | (code & 0x3f));
    }
  }

  uint32_t parse_hex4() {
    if (pos_ + 4 > text_.size()) fail("short \\u escape");
    const uint32_t code = uint32_t(std::stoul(std::string(text_.substr(pos_, 4)), nullptr, 16));
    pos_ += 4;
    return code;
  }

  std::string parse_string() {
    ++pos_;  // the opening quote
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) fail("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) fail("unterminated escape");
      const char escape = text_[pos_++];
      switch (escape) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t code = parse_hex4();
          if (code >= 0xd800 && code < 0xdc00 && consume("\\u")) {
            const uint32_t low = parse_hex4();
            code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
          }
          append_utf8(out, code);
          break;
        }
        default: fail("unknown escape");
      }
    }
  }

  Json parse_array() {
    ++pos_;
    Json value;
    value.kind = Json::Kind::array;
    skip_space();
    if (consume("]")) return value;
    while (true) {
      value.items.push_back(parse_value());
      skip_space();
      if (consume("]")) return value;
      if (!consume(",")) fail("expected ',' or ']'");
    }
  }

  Json parse_object() {
    ++pos_;
    Json value;
    value.kind = Json::Kind::object;
    skip_space();
    if (consume("}")) return value;
    while (true) {
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != '"') fail("expected a key");
      std::string key = parse_string();
      skip_space();
      if (!consume(":")) fail("expected ':'");
      value.members.emplace_back(std::move(key), parse_value());
      skip_space();
      if (consume("}")) return value;
      if (!consume(",")) fail("expected ',' or '}'");
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

bool Json::is_float_token() const {
  return kind == Kind::number && text.find_first_of(".eEaI") != std::string::npos;
}

const Json* Json::get(std::string_view key) const {
  for (const auto& member : members) {
    if (member.first == key) return &member.second;
  }
  return nullptr;
}

Json parse(std::string_view text) { return Parser(text).document(); }

}  // namespace testjson
