#include "rlinks/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "rlinks/errors.hpp"

namespace rlinks {

SampledAction sample_categorical(const float* logits, size_t count, std::mt19937_64& rng) {
  if (count == 0) throw UsageError("no logits to sample from");
  double largest = logits[0];
  for (size_t i = 0; i < count; ++i) {
    if (!std::isfinite(logits[i])) throw UsageError("the policy put out a non-finite logit");
    largest = std::max(largest, double(logits[i]));
  }
  std::vector<double> cumulative(count);
  double total = 0.0;
  for (size_t i = 0; i < count; ++i) {
    total += std::exp(double(logits[i]) - largest);
    cumulative[i] = total;
  }
  // A uniform double in [0, 1) from 53 random bits, scaled by the total so
  // rounding in the sum can't leave it past the last class.
  const double u = double(rng() >> 11) * 0x1.0p-53 * total;
  size_t action = 0;
  while (action + 1 < count && cumulative[action] <= u) ++action;
  const double logp = double(logits[action]) - largest - std::log(total);
  return {int64_t(action), float(logp)};
}

}  // namespace rlinks
