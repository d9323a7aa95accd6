#include "rlinks/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "rlinks/errors.hpp"

namespace rlinks {
namespace {

constexpr double kHalfLogTwoPi = 0.91893853320467274178;  // 0.5 * log(2 pi)

// The largest of `count` finite values; UsageError for none or a non-finite one.
double checked_max(const float* values, size_t count, const char* what) {
  if (count == 0) throw UsageError(std::string("no ") + what + " to sample from");
  double largest = values[0];
  for (size_t i = 0; i < count; ++i) {
    if (!std::isfinite(values[i])) {
      throw UsageError(std::string("the policy put out a non-finite ") + what +
                       " (NaN or inf in the observation or the weights)");
    }
    largest = std::max(largest, double(values[i]));
  }
  return largest;
}

double log_sum_exp(const float* logits, size_t count, double largest) {
  double total = 0.0;
  for (size_t i = 0; i < count; ++i) total += std::exp(double(logits[i]) - largest);
  return std::log(total);
}

}  // namespace

SampledAction sample_categorical(const float* logits, size_t count, std::mt19937_64& rng) {
  const double largest = checked_max(logits, count, "logit");
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

SampledAction greedy_categorical(const float* logits, size_t count) {
  checked_max(logits, count, "logit");
  return {int64_t(std::max_element(logits, logits + count) - logits), 0.0f};
}

float categorical_logp(const float* logits, size_t count, int64_t action) {
  if (action < 0 || uint64_t(action) >= count) {
    throw UsageError("action " + std::to_string(action) + " is not in 0.." + std::to_string(count) + "-1");
  }
  const double largest = checked_max(logits, count, "logit");
  return float(double(logits[action]) - largest - log_sum_exp(logits, count, largest));
}

float sample_gaussian(const float* dist_inputs, size_t size, std::mt19937_64& rng, float* action) {
  checked_max(dist_inputs, 2 * size, "mean or log-std");
  std::normal_distribution<float> normal;
  for (size_t i = 0; i < size; ++i) action[i] = dist_inputs[i] + std::exp(dist_inputs[size + i]) * normal(rng);
  return gaussian_logp(dist_inputs, size, action);
}

float gaussian_logp(const float* dist_inputs, size_t size, const float* action) {
  double logp = 0.0;
  for (size_t i = 0; i < size; ++i) {
    const double log_std = dist_inputs[size + i];
    const double z = (double(action[i]) - double(dist_inputs[i])) / std::exp(log_std);
    logp += -0.5 * z * z - log_std - kHalfLogTwoPi;
  }
  return float(logp);
}

}  // namespace rlinks
