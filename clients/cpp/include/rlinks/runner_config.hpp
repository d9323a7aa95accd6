// What a runner's SET_CONFIG says about its setup, in rlinks' msgpack form (PROTOCOL.md section 9).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "rlinks/value.hpp"

namespace rlinks {

struct RunnerConfig {
  std::string algorithm;
  uint64_t rollout_fragment_length = 0;
  bool on_policy = true;
  std::string fcnet_activation = "tanh";       // RLlib's defaults when model_config
  std::string head_fcnet_activation = "relu";  // does not name them
  std::optional<uint64_t> discrete_actions;    // n of a Discrete action space that starts at 0
  std::vector<uint64_t> observation_shape;     // of a Box observation space
  // A paced runner (off_policy_backlog: pace) takes about this many batches of each client at its next
  // sample(): an off-policy client keeps no more than this many sent and unconfirmed (PROTOCOL.md 9).
  // nullopt when absent or not an int >= 1 (a runner's mistake never stalls its clients).
  std::optional<uint64_t> paced_in_flight;
  Value description;                           // the whole map
};

// The description a SET_CONFIG carries: `config` when it is a map, else
// `rlinks_config`; nullopt when only RLlib's pickle is there (never
// unpickled). Throws ProtocolError invalid_message when it is malformed.
std::optional<RunnerConfig> read_runner_config(const Value& set_config);

}  // namespace rlinks
