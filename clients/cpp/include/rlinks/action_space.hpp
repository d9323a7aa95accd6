// The action spaces a local policy acts in (Discrete and Box), and the action a simulator applies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "rlinks/value.hpp"

namespace rlinks {

// Discrete(n) (actions 0..n-1) or a float Box of `shape` between `low` and
// `high` (prod(shape) floats each, C order; infinite where unbounded).
struct ActionSpace {
  enum class Kind { discrete, box };
  Kind kind = Kind::discrete;
  uint64_t n = 0;
  std::vector<uint64_t> shape;
  std::vector<float> low, high;

  // Throw UsageError for n < 1, a shape with a size < 1, bounds of another
  // length than prod(shape) (one value is broadcast), or low > high.
  static ActionSpace discrete(uint64_t n);
  static ActionSpace box(std::vector<uint64_t> shape, std::vector<float> low, std::vector<float> high);

  bool is_box() const { return kind == Kind::box; }
  // Numbers in one Box action (prod(shape)); 1 for a Discrete one.
  size_t size() const;
  // RLlib's action_dist_inputs for one action: n logits, or a Box's mean and log-std.
  size_t dist_inputs() const { return is_box() ? 2 * size() : size_t(n); }
  // "Discrete(2)", "Box(-2.0, 2.0, (1,))".
  std::string str() const;
};

// A shape as Python prints a tuple: "(4,)", "(2, 3)".
std::string shape_str(const std::vector<uint64_t>& shape);

// One action as the simulator applies it.
struct Action {
  int64_t index = 0;          // a Discrete space's action
  std::vector<float> values;  // a Box space's action (prod(shape) floats, C order); empty for Discrete

  // A Discrete action, and a Box action (prod(shape) floats), e.g. for EnvClient::log_action.
  static Action of_index(int64_t index) { return Action{index, {}}; }
  static Action of_box(std::vector<float> values) { return Action{0, std::move(values)}; }

  bool is_box() const { return !values.empty(); }
  // The index of a Discrete action; UsageError for a Box one.
  int64_t discrete() const;
  // The numbers of a Box action; UsageError for a Discrete one.
  const std::vector<float>& box() const;
};

// The space a SET_CONFIG's `action_space` describes (PROTOCOL.md section 9),
// or UnsupportedModel naming what it is instead (MultiDiscrete, a Discrete
// that does not start at 0, nested spaces).
ActionSpace read_action_space(const Value& description);

// A Box action as the simulator applies it, from the Gaussian's sample (RLlib's
// NormalizeAndClipActions, as rlinks_rllib/client/policies/sampling.py's
// action_for_env): with `normalize`, unsquashed from [-1, 1] to the bounds and
// clipped to them (left alone when a bound is infinite); else, with `clip`,
// clipped to the bounds; else unchanged.
std::vector<float> action_for_env(const ActionSpace& space, const float* sampled, bool normalize, bool clip);

// A Box action as the env took it (a person's, a script's: EnvClient::log_action),
// back in the form RLlib trains on: action_for_env undone, as
// rlinks_rllib/client/policies/sampling.py's action_from_env. With `normalize` and finite
// bounds it is squashed back into [-1, 1]; else it is kept (clipping can't be
// undone). Throws UsageError for a Discrete space, an action of another size
// than the Box's, or a NaN or an infinity in it.
std::vector<float> action_from_env(const ActionSpace& space, const std::vector<float>& taken, bool normalize);

}  // namespace rlinks
