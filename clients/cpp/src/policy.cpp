#include "rlinks/policy.hpp"

#include <cmath>
#include <string>
#include <utility>

#include "rlinks/errors.hpp"
#include "rlinks/sampling.hpp"

namespace rlinks {

LocalPolicy::LocalPolicy(const WeightSet& weights, ActionSpace space, std::string fcnet_activation,
                         std::string head_fcnet_activation, PolicyOptions options)
    : space_(std::move(space)), activation_(std::move(fcnet_activation)),
      head_activation_(std::move(head_fcnet_activation)), options_(options),
      network_(Network::from_weights(weights, activation_, head_activation_, space_)), seq_no_(weights.seq_no) {}

void LocalPolicy::set_weights(const WeightSet& weights) {
  if (weights.seq_no != 0 && weights.seq_no < seq_no_) return;
  network_ = Network::from_weights(weights, activation_, head_activation_, space_);
  seq_no_ = weights.seq_no;
}

PolicyOutput LocalPolicy::compute(const float* observation, std::mt19937_64& rng) {
  PolicyOutput out;
  compute(observation, rng, out);
  return out;
}

void LocalPolicy::forward(const float* observation, PolicyOutput& out) {
  out.dist_inputs = network_.logits(observation);
  for (float x : out.dist_inputs) {
    if (!std::isfinite(x)) throw UsageError("the policy put out NaN or inf: is the observation finite?");
  }
}

void LocalPolicy::compute(const float* observation, std::mt19937_64& rng, PolicyOutput& out) {
  forward(observation, out);
  const float* inputs = out.dist_inputs.data();
  if (!space_.is_box()) {
    const SampledAction sampled = options_.explore ? sample_categorical(inputs, out.dist_inputs.size(), rng)
                                                   : greedy_categorical(inputs, out.dist_inputs.size());
    out.for_env.index = sampled.action;
    out.logp = sampled.logp;
    return;
  }
  const size_t size = space_.size();
  out.sampled.resize(size);
  if (options_.explore) {
    out.logp = sample_gaussian(inputs, size, rng, out.sampled.data());
  } else {
    out.sampled.assign(inputs, inputs + size);
  }
  out.for_env.values = action_for_env(space_, out.sampled.data(), options_.normalize_actions, options_.clip_actions);
}

void LocalPolicy::check_action(const Action& taken) const {
  if (space_.is_box() != taken.is_box()) {
    throw UsageError(std::string("a ") + (taken.is_box() ? "Box" : "Discrete") + " action for " + space_.str());
  }
  if (space_.is_box()) {
    action_from_env(space_, taken.values, options_.normalize_actions);
  } else if (taken.index < 0 || uint64_t(taken.index) >= space_.n) {
    throw UsageError("action " + std::to_string(taken.index) + " is not one of " + space_.str() + " (0.." +
                     std::to_string(space_.n - 1) + ")");
  }
}

void LocalPolicy::output_for(const float* observation, const Action& taken, PolicyOutput& out) {
  check_action(taken);
  std::vector<float> sampled;
  if (space_.is_box()) sampled = action_from_env(space_, taken.values, options_.normalize_actions);
  forward(observation, out);  // after the checks: a refused action leaves `out` as it was
  const float* inputs = out.dist_inputs.data();
  if (!space_.is_box()) {
    out.logp = categorical_logp(inputs, out.dist_inputs.size(), taken.index);
    out.for_env.index = taken.index;
    out.for_env.values.clear();
    out.sampled.clear();
    return;
  }
  out.sampled = std::move(sampled);
  out.logp = gaussian_logp(inputs, space_.size(), out.sampled.data());
  out.for_env.values = action_for_env(space_, out.sampled.data(), options_.normalize_actions, options_.clip_actions);
}

}  // namespace rlinks
