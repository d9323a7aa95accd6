#include "rlinks/offer.hpp"

#include <algorithm>
#include <utility>

#include "rlinks/errors.hpp"

namespace rlinks {
namespace {

constexpr size_t kMaxNames = 64;
constexpr size_t kMaxNameChars = 64;
constexpr size_t kMaxAgentChars = 128;
constexpr size_t kMaxExtraKeys = 64;
constexpr size_t kMaxExtraDepth = 8;

ProtocolError malformed(const std::string& why) { return ProtocolError(ErrorCode::invalid_message, why); }

void check_depth(const Map& extra) {
  std::vector<std::pair<const Value*, size_t>> pending;
  for (const MapEntry& entry : extra) pending.emplace_back(&entry.value, 1);
  while (!pending.empty()) {
    const auto [value, depth] = pending.back();
    pending.pop_back();
    if (!value->is_array() && !value->is_map()) continue;
    if (depth >= kMaxExtraDepth) {
      throw malformed("'rlinks' offer nested deeper than " + std::to_string(kMaxExtraDepth) + " levels");
    }
    if (value->is_array()) {
      for (const Value& item : value->as_array()) pending.emplace_back(&item, depth + 1);
    } else {
      for (const MapEntry& entry : value->as_map()) pending.emplace_back(&entry.value, depth + 1);
    }
  }
}

}  // namespace

bool Offer::names(std::string_view name) const {
  return std::find(extensions.begin(), extensions.end(), name) != extensions.end();
}

const Value* Offer::get(std::string_view key) const {
  for (auto entry = extra.rbegin(); entry != extra.rend(); ++entry) {
    if (entry->key.is_str() && entry->key.as_str() == key) return &entry->value;
  }
  return nullptr;
}

Value make_offer(std::vector<std::string> extensions, const std::string& agent, Map extra) {
  std::sort(extensions.begin(), extensions.end());
  extensions.erase(std::unique(extensions.begin(), extensions.end()), extensions.end());
  Array names(extensions.begin(), extensions.end());
  Map offer{{"version", kExtensionsVersion}, {"extensions", std::move(names)}};
  if (!agent.empty()) offer.push_back({"agent", agent});
  for (MapEntry& entry : extra) offer.push_back(std::move(entry));
  return Value(std::move(offer));
}

std::optional<Offer> parse_offer(const Value& message) {
  const Value* raw = message.find("rlinks");
  if (raw == nullptr || raw->is_nil()) return std::nullopt;
  if (!raw->is_map()) throw malformed("'rlinks' must be a map");
  Offer offer;
  const Value* version = raw->find("version");
  if (version == nullptr || !version->get_uint64(offer.version) || offer.version < 1) {
    throw malformed("'rlinks.version' must be a positive int");
  }
  if (const Value* names = raw->find("extensions")) {
    if (!names->is_array() || names->as_array().size() > kMaxNames) {
      throw malformed("'rlinks.extensions' must be a list of at most " + std::to_string(kMaxNames) + " names");
    }
    for (const Value& name : names->as_array()) {
      if (!name.is_str() || name.as_str().empty() || name.as_str().size() > kMaxNameChars) {
        throw malformed("'rlinks.extensions' must hold non-empty short strings");
      }
      offer.extensions.push_back(name.as_str());
    }
  }
  if (const Value* agent = raw->find("agent")) {
    if (!agent->is_str()) throw malformed("'rlinks.agent' must be a string");
    offer.agent = agent->as_str().substr(0, kMaxAgentChars);
  }
  for (const MapEntry& entry : raw->as_map()) {
    const bool known = entry.key.is_str() &&
                       (entry.key.as_str() == "version" || entry.key.as_str() == "extensions" || entry.key.as_str() == "agent");
    if (!known) offer.extra.push_back(entry);
  }
  if (offer.extra.size() > kMaxExtraKeys) {
    throw malformed("'rlinks' may carry at most " + std::to_string(kMaxExtraKeys) + " other keys");
  }
  check_depth(offer.extra);
  return offer;
}

}  // namespace rlinks
