// Discrete actions from logits, as RLlib's TorchCategorical draws them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>

namespace rlinks {

struct SampledAction {
  int64_t action = 0;  // index into the logits
  float logp = 0.0f;   // its log-probability under softmax(logits): RLlib's action_logp
};

// Draws one action from softmax(logits[0..count)). Throws UsageError for
// count 0 or a non-finite logit.
SampledAction sample_categorical(const float* logits, size_t count, std::mt19937_64& rng);

}  // namespace rlinks
