// The policy a client runs itself: RLlib's default MLP from the runner's weights, sampled as RLlib samples.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "rlinks/action_space.hpp"
#include "rlinks/mlp.hpp"
#include "rlinks/weights.hpp"

namespace rlinks {

struct PolicyOptions {
  bool explore = true;            // sample; false: the greedy action (argmax, or the mean), logp 0
  bool normalize_actions = true;  // RLlib's AlgorithmConfig.env_runners(normalize_actions=..., clip_actions=...):
  bool clip_actions = false;      // how a Box action becomes the one the env applies (action_for_env)
};

// One observation's action, and what RLlib wants recorded with it.
struct PolicyOutput {
  Action for_env;                  // what the simulator applies (a Box action unsquashed or clipped)
  std::vector<float> sampled;      // Box: the Gaussian's sample, the action RLlib trains on; empty for Discrete
  float logp = 0.0f;               // action_logp
  std::vector<float> dist_inputs;  // action_dist_inputs
};

// RLlib's default MLP for `space`, run from the latest weights. Not
// thread-safe (one per thread, as Network).
class LocalPolicy {
 public:
  // Throws UnsupportedModel when the weights are not such a module for `space`.
  LocalPolicy(const WeightSet& weights, ActionSpace space, std::string fcnet_activation,
              std::string head_fcnet_activation, PolicyOptions options = {});

  // Runs newer weights from now on; a set older than the one in use is
  // ignored (PROTOCOL.md section 8). Throws UnsupportedModel (the old weights stay).
  void set_weights(const WeightSet& weights);

  // The action for one observation of observation_size() floats. Throws
  // UsageError when the network puts out NaN or inf.
  PolicyOutput compute(const float* observation, std::mt19937_64& rng);
  // The same into `out`, reusing its buffers (no allocation per step once they have grown).
  void compute(const float* observation, std::mt19937_64& rng, PolicyOutput& out);
  // The output for an action the simulator chose itself (a person, a script:
  // EnvClient::log_action), as RLlib's old PolicyClient.log_action recorded
  // it and as rlinks_rllib's Policy.outputs_for computes it: the module's
  // dist_inputs for `observation`, the action back in the form RLlib trains on
  // (`sampled`: a Box action squashed back by action_from_env), its
  // log-probability under them (whether exploring or not), and `for_env` that
  // action as the env applies it (clipped). Throws UsageError for an action
  // that is not one of the space (a Discrete one out of range, a Box one of
  // another size or not finite), or as compute().
  void output_for(const float* observation, const Action& taken, PolicyOutput& out);
  // Throws UsageError unless `taken` is an action of the space (as output_for checks it).
  void check_action(const Action& taken) const;

  size_t observation_size() const { return network_.observation_size(); }
  const ActionSpace& action_space() const { return space_; }
  uint64_t seq_no() const { return seq_no_; }

 private:
  // out.dist_inputs for `observation`, checked finite.
  void forward(const float* observation, PolicyOutput& out);

  ActionSpace space_;
  std::string activation_, head_activation_;
  PolicyOptions options_;
  Network network_;
  uint64_t seq_no_ = 0;
};

}  // namespace rlinks
