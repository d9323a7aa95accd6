// RLlib's default MLP RLModule (PPO, APPO, IMPALA), run from its weights (PROTOCOL.md section 8).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "rlinks/action_space.hpp"
#include "rlinks/weights.hpp"

namespace rlinks {

// The actor of RLlib's default module for a 1-D observation and a Discrete
// or Box action space:
//   encoder: Linear -> [LayerNorm] -> fcnet_activation        (every layer)
//   pi head: Linear -> [LayerNorm] -> head_fcnet_activation   (hidden layers)
//            Linear                                           (the outputs)
// read from `encoder.actor_encoder.net.mlp.N.*` (or `encoder.encoder.*` when
// the encoder is shared) and `pi.net.mlp.N.*`. For a Box the outputs are the
// Gaussian's mean and log-std, the log-std clamped to
// +-`pi.log_std_clip_param_const` (or, with free_log_std, the head puts out
// the mean and `pi.log_std` is the log-std). Not thread-safe: it keeps its
// scratch space.
class Network {
 public:
  // Activation names as RLlib's DefaultModelConfig spells them: linear, tanh,
  // relu, elu, sigmoid, silu, swish. Throws UnsupportedModel when the weights
  // are not such a module or do not fit `space`.
  static Network from_weights(const WeightSet& weights, std::string_view fcnet_activation,
                              std::string_view head_fcnet_activation, const ActionSpace& space);
  // The same for Discrete(num_actions).
  static Network from_weights(const WeightSet& weights, std::string_view fcnet_activation,
                              std::string_view head_fcnet_activation, size_t num_actions);

  size_t observation_size() const { return layers_.front().inputs; }
  // The width of action_dist_inputs: n logits, or a Box's mean and log-std.
  size_t num_outputs() const { return box_size_ > 0 ? 2 * box_size_ : layers_.back().outputs; }

  // RLlib's action_dist_inputs for one observation of observation_size()
  // floats; valid until the next call.
  const std::vector<float>& logits(const float* observation);

  enum class Activation { linear, tanh, relu, elu, sigmoid, silu };

 private:
  struct Dense {
    size_t inputs = 0;
    size_t outputs = 0;
    std::vector<float> weight;  // [outputs][inputs], as torch stores it
    std::vector<float> bias;    // empty: none
    std::vector<float> norm_weight, norm_bias;  // LayerNorm; empty: none
    Activation activation = Activation::linear;
  };

  static std::vector<Dense> read_mlp(const WeightSet& weights, const std::string& prefix, Activation between,
                                     std::string_view between_name, Activation last);

  std::vector<Dense> layers_;  // the encoder's, then the pi head's
  size_t box_size_ = 0;        // a Box's size; 0: Discrete
  std::vector<float> free_log_std_;  // free_log_std=True: the log-std, clamped already
  float log_std_clip_ = 0.0f;
  std::vector<float> input_, output_;
};

}  // namespace rlinks
