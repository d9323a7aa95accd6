// RLlib's default MLP RLModule (PPO, APPO, IMPALA), run from its weights (PROTOCOL.md section 8).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "rlinks/weights.hpp"

namespace rlinks {

// The actor of RLlib's default module for a 1-D observation and a Discrete
// action space:
//   encoder: Linear -> [LayerNorm] -> fcnet_activation        (every layer)
//   pi head: Linear -> [LayerNorm] -> head_fcnet_activation   (hidden layers)
//            Linear                                           (the logits)
// read from `encoder.actor_encoder.net.mlp.N.*` (or `encoder.encoder.*` when
// the encoder is shared) and `pi.net.mlp.N.*`. Not thread-safe: it keeps its
// scratch space.
class Network {
 public:
  // Activation names as RLlib's DefaultModelConfig spells them: linear, tanh,
  // relu, elu, sigmoid, silu, swish. Throws UnsupportedModel when the weights
  // are not such a module or do not put out `num_actions` logits.
  static Network from_weights(const WeightSet& weights, std::string_view fcnet_activation,
                              std::string_view head_fcnet_activation, size_t num_actions);

  size_t observation_size() const { return layers_.front().inputs; }
  size_t num_outputs() const { return layers_.back().outputs; }

  // The logits (RLlib's action_dist_inputs) for one observation of
  // observation_size() floats; valid until the next call.
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
  std::vector<float> input_, output_;
};

}  // namespace rlinks
