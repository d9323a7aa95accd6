// The `rlinks` extension offer that PING and PONG carry (PROTOCOL.md section 10).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rlinks/value.hpp"

namespace rlinks {

constexpr uint64_t kExtensionsVersion = 1;

namespace extension {
constexpr std::string_view want_steps = "want_steps";
constexpr std::string_view ack = "ack";
constexpr std::string_view auth = "auth";
constexpr std::string_view endpoints = "endpoints";
constexpr std::string_view served_actions = "served_actions";
constexpr std::string_view served_taken = "served_taken";  // ACT's taken_mask, taken, train (section 10.5.1)
constexpr std::string_view takeover = "takeover";          // steps a person or a script took over (section 10.8)
}  // namespace extension

struct Offer {
  uint64_t version = kExtensionsVersion;
  std::vector<std::string> extensions;
  std::string agent;
  Map extra;  // every other key: client_id, auth_nonce, role, ...

  bool names(std::string_view name) const;
  const Value* get(std::string_view key) const;
};

// The `rlinks` map for a PING: version, the names sorted, agent, then `extra`.
Value make_offer(std::vector<std::string> extensions, const std::string& agent, Map extra);

// The offer in a PING or PONG; nullopt for a plain RLlink peer (no `rlinks`
// key). Throws ProtocolError invalid_message when the offer is malformed.
std::optional<Offer> parse_offer(const Value& message);

}  // namespace rlinks
