// Actions from a policy's action_dist_inputs, as RLlib draws them
// (rlinks_rllib/client/policies/sampling.py is the reference; tests/vectors/policy pins both).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>

namespace rlinks {

struct SampledAction {
  int64_t action = 0;  // index into the logits
  float logp = 0.0f;   // its log-probability under softmax(logits): RLlib's action_logp
};

// Draws one action from softmax(logits[0..count)) (TorchCategorical). Throws
// UsageError for count 0 or a non-finite logit.
SampledAction sample_categorical(const float* logits, size_t count, std::mt19937_64& rng);

// The greedy action: the first largest logit, with logp 0 (TorchDeterministic).
// Throws as sample_categorical.
SampledAction greedy_categorical(const float* logits, size_t count);

// log softmax(logits)[action], as float32. Throws UsageError for an action outside 0..count-1.
float categorical_logp(const float* logits, size_t count, int64_t action);

// Draws one action of a diagonal Gaussian (TorchDiagGaussian) from
// `dist_inputs` = [mean (size), log_std (size)] into `action` (size floats:
// mean + exp(log_std) * N(0, 1), in float32) and returns its log-probability.
// Throws UsageError for size 0 or a non-finite input.
float sample_gaussian(const float* dist_inputs, size_t size, std::mt19937_64& rng, float* action);

// The Gaussian's log-probability of `action` (size floats), summed over the
// dimensions in float64, as float32.
float gaussian_logp(const float* dist_inputs, size_t size, const float* action);

}  // namespace rlinks
