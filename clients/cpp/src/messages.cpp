#include "rlinks/messages.hpp"

#include <array>
#include <string>

#include "rlinks/errors.hpp"

namespace rlinks {
namespace {

struct TypeName {
  MessageType type;
  const char* name;
};

constexpr std::array<TypeName, 16> kTypeNames{{
    {MessageType::ping, "PING"},
    {MessageType::pong, "PONG"},
    {MessageType::get_config, "GET_CONFIG"},
    {MessageType::set_config, "SET_CONFIG"},
    {MessageType::get_state, "GET_STATE"},
    {MessageType::set_state, "SET_STATE"},
    {MessageType::episodes, "EPISODES"},
    {MessageType::episodes_and_get_state, "EPISODES_AND_GET_STATE"},
    {MessageType::error, "ERROR"},
    {MessageType::ack, "ACK"},
    {MessageType::auth, "AUTH"},
    {MessageType::auth_ok, "AUTH_OK"},
    {MessageType::get_endpoints, "GET_ENDPOINTS"},
    {MessageType::endpoints, "ENDPOINTS"},
    {MessageType::act, "ACT"},
    {MessageType::actions, "ACTIONS"},
}};

// RLlib's old API stack: recognised, always refused.
constexpr std::array<const char*, 10> kOldApiTypes{
    "ACTION_SPACE", "OBSERVATION_SPACE", "GET_WORKER_ARGS", "GET_WEIGHTS", "REPORT_SAMPLES",
    "START_EPISODE", "GET_ACTION",       "LOG_ACTION",      "LOG_RETURNS", "END_EPISODE",
};

enum Accepts : unsigned { kCount = 1, kStr = 2, kBin = 4, kList = 8, kMapField = 16, kNdArray = 32 };

struct FieldRule {
  MessageType type;
  const char* field;
  unsigned accepts;
  bool required;
};

constexpr std::array<FieldRule, 27> kFieldRules{{
    {MessageType::ping, "rlinks", kMapField, false},
    {MessageType::pong, "rlinks", kMapField, false},
    {MessageType::set_config, "config", kBin | kMapField, true},
    {MessageType::set_config, "rlinks_config", kMapField, false},
    {MessageType::set_state, "state", kMapField, true},
    {MessageType::set_state, "want_steps", kCount, false},
    {MessageType::episodes, "episodes", kList, true},
    {MessageType::episodes, "timesteps", kCount, false},
    {MessageType::episodes, "seq", kCount, false},
    {MessageType::episodes_and_get_state, "episodes", kList, true},
    {MessageType::episodes_and_get_state, "timesteps", kCount, false},
    {MessageType::episodes_and_get_state, "seq", kCount, false},
    {MessageType::error, "code", kStr, true},
    {MessageType::error, "message", kStr, true},
    {MessageType::ack, "seq", kCount, true},
    {MessageType::auth, "proof", kBin, true},
    {MessageType::auth_ok, "proof", kBin, true},
    {MessageType::endpoints, "endpoints", kList, true},
    {MessageType::act, "env", kList, true},
    {MessageType::act, "obs", kNdArray | kList, true},
    {MessageType::act, "reward", kNdArray | kList, true},
    {MessageType::act, "start", kNdArray | kList, true},
    {MessageType::act, "terminated", kNdArray | kList, true},
    {MessageType::act, "truncated", kNdArray | kList, true},
    {MessageType::actions, "env", kList, true},
    {MessageType::actions, "actions", kNdArray | kList, true},
    {MessageType::actions, "weights_seq_no", kCount, true},
}};

bool accepted(const Value& value, unsigned accepts) {
  return ((accepts & kCount) && value.is_count()) || ((accepts & kStr) && value.is_str()) ||
         ((accepts & kBin) && value.is_bin()) || ((accepts & kList) && value.is_array()) ||
         ((accepts & kMapField) && value.is_map()) || ((accepts & kNdArray) && value.is_ndarray());
}

std::string expected(unsigned accepts) {
  std::string text;
  const auto add = [&](unsigned bit, const char* name) {
    if (!(accepts & bit)) return;
    if (!text.empty()) text += " or ";
    text += name;
  };
  add(kCount, "an int >= 0");
  add(kStr, "str");
  add(kBin, "bin");
  add(kNdArray, "a numpy array");
  add(kList, "a list");
  add(kMapField, "a map");
  return text;
}

void check_field(const Value& message, const FieldRule& rule) {
  const Value* value = message.find(rule.field);
  if (value == nullptr) {
    if (!rule.required) return;
    throw ProtocolError(ErrorCode::invalid_message,
                        std::string(to_string(rule.type)) + ": missing required field '" + rule.field + "'");
  }
  if (!accepted(*value, rule.accepts)) {
    throw ProtocolError(ErrorCode::invalid_message, std::string(to_string(rule.type)) + ": field '" + rule.field +
                                                        "' must be " + expected(rule.accepts) + ", got " +
                                                        value->type_name());
  }
}

}  // namespace

const char* to_string(MessageType type) {
  for (const TypeName& entry : kTypeNames) {
    if (entry.type == type) return entry.name;
  }
  return "?";
}

std::optional<MessageType> message_type_named(std::string_view name) {
  for (const TypeName& entry : kTypeNames) {
    if (name == entry.name) return entry.type;
  }
  return std::nullopt;
}

MessageType validate_message(const Value& message) {
  if (!message.is_map()) {
    throw ProtocolError(ErrorCode::invalid_message,
                        std::string("a message must be a msgpack map, got ") + message.type_name());
  }
  const Value* name = message.find("type");
  if (name == nullptr || !name->is_str()) {
    throw ProtocolError(ErrorCode::invalid_message, "a message must have a str field 'type'");
  }
  const std::optional<MessageType> type = message_type_named(name->as_str());
  if (!type) {
    for (const char* old : kOldApiTypes) {
      if (name->as_str() == old) {
        throw ProtocolError(ErrorCode::unsupported_message,
                            name->as_str() + " belongs to RLlib's old API stack and is not supported");
      }
    }
    throw ProtocolError(ErrorCode::unsupported_message, "unknown message type '" + name->as_str().substr(0, 64) + "'");
  }
  for (const FieldRule& rule : kFieldRules) {
    if (rule.type == *type) check_field(message, rule);
  }
  if (*type == MessageType::episodes || *type == MessageType::episodes_and_get_state) {
    const Array& episodes = message.find("episodes")->as_array();
    for (size_t i = 0; i < episodes.size(); ++i) {
      if (!episodes[i].is_map()) {
        throw ProtocolError(ErrorCode::invalid_message, std::string(to_string(*type)) + ": episodes[" +
                                                            std::to_string(i) + "] must be a map, got " +
                                                            episodes[i].type_name());
      }
    }
  }
  return *type;
}

Value make_message(MessageType type, Map fields) {
  Map entries{{"type", to_string(type)}};
  for (MapEntry& entry : fields) entries.push_back(std::move(entry));
  return Value(std::move(entries));
}

}  // namespace rlinks
