// RLlink's message types and the fields each must carry (PROTOCOL.md section 5).
#pragma once

#include <optional>
#include <string_view>

#include "rlinks/value.hpp"

namespace rlinks {

enum class MessageType {
  ping,
  pong,
  get_config,
  set_config,
  get_state,
  set_state,
  episodes,
  episodes_and_get_state,
  error,
  ack,
  auth,
  auth_ok,
  get_endpoints,
  endpoints,
  act,      // served_actions (section 10.5)
  actions,  // served_actions
};

// The type as spelled on the wire ("EPISODES_AND_GET_STATE", ...).
const char* to_string(MessageType type);
std::optional<MessageType> message_type_named(std::string_view name);

// Checks that `message` is a map with a known, current str `type` and the
// fields its type requires, of the right types; other keys are left alone.
// Throws ProtocolError: invalid_message (not a map, no str type, a field
// missing or mistyped), unsupported_message (unknown or old-API type).
MessageType validate_message(const Value& message);

// {"type": <type>} with further entries to add.
Value make_message(MessageType type, Map fields = {});

}  // namespace rlinks
