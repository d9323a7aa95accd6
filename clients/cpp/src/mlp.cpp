#include "rlinks/mlp.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "rlinks/errors.hpp"

namespace rlinks {
namespace {

// RLlib's TorchMLP builds nn.LayerNorm(eps=0.001).
constexpr float kLayerNormEpsilon = 1e-3f;

constexpr std::string_view kEncoderPrefixes[] = {"encoder.encoder.net.mlp.", "encoder.actor_encoder.net.mlp."};
constexpr std::string_view kPiPrefix = "pi.net.mlp.";
constexpr std::string_view kPiLogStd = "pi.log_std";
constexpr std::string_view kPiLogStdClip = "pi.log_std_clip_param_const";
// Critic and target networks: in a full (not inference-only) state; the actor does not need them.
constexpr std::string_view kIgnoredPrefixes[] = {"vf.", "encoder.critic_encoder.", "_old_encoder.", "_old_pi."};

bool starts_with(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }

UnsupportedModel unsupported(const std::string& what) {
  return UnsupportedModel("not one of RLlib's default MLP RLModules for a Discrete or Box action space: " + what +
                          " (served actions, or the Python client's ONNX policy, run any module)");
}

Network::Activation activation_named(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (lower == "linear") return Network::Activation::linear;
  if (lower == "tanh") return Network::Activation::tanh;
  if (lower == "relu") return Network::Activation::relu;
  if (lower == "elu") return Network::Activation::elu;
  if (lower == "sigmoid") return Network::Activation::sigmoid;
  if (lower == "silu" || lower == "swish") return Network::Activation::silu;
  throw UnsupportedModel("activation '" + std::string(name) + "' is not one this client knows "
                         "(linear, tanh, relu, elu, sigmoid, silu, swish)");
}

float sigmoid(float x) { return 0.5f * (1.0f + std::tanh(0.5f * x)); }

void activate(Network::Activation activation, std::vector<float>& values) {
  switch (activation) {
    case Network::Activation::linear: return;
    case Network::Activation::tanh:
      for (float& x : values) x = std::tanh(x);
      return;
    case Network::Activation::relu:
      for (float& x : values) x = std::max(x, 0.0f);
      return;
    case Network::Activation::elu:
      for (float& x : values) x = x > 0 ? x : std::expm1(x);
      return;
    case Network::Activation::sigmoid:
      for (float& x : values) x = sigmoid(x);
      return;
    case Network::Activation::silu:
      for (float& x : values) x = x * sigmoid(x);
      return;
  }
}

}  // namespace

std::vector<Network::Dense> Network::read_mlp(const WeightSet& weights, const std::string& prefix, Activation between,
                                              std::string_view between_name, Activation last) {
  // Index in the torch nn.Sequential -> {"weight": ..., "bias": ...}
  std::map<size_t, std::map<std::string, const NdArray*>> entries;
  for (const auto& [name, array] : weights.params) {
    if (!starts_with(name, prefix)) continue;
    const std::string rest = name.substr(prefix.size());
    const size_t dot = rest.find('.');
    const std::string index = rest.substr(0, dot);
    const std::string leaf = dot == std::string::npos ? "" : rest.substr(dot + 1);
    const bool digits = !index.empty() && index.size() < 6 &&
                        std::all_of(index.begin(), index.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || (leaf != "weight" && leaf != "bias")) throw unsupported("unexpected parameter '" + name + "'");
    entries[std::stoul(index)][leaf] = &array;
  }
  if (entries.empty()) throw unsupported("no layers under '" + prefix + "'");

  const auto lookup = [&](size_t index, const char* leaf) -> const NdArray* {
    const auto layer = entries.find(index);
    if (layer == entries.end()) return nullptr;
    const auto found = layer->second.find(leaf);
    return found == layer->second.end() ? nullptr : found->second;
  };
  const size_t end = entries.rbegin()->first;
  std::vector<Dense> layers;
  size_t used = 0;
  size_t pos = 0;
  while (true) {
    const NdArray* weight = lookup(pos, "weight");
    if (weight == nullptr || weight->shape().size() != 2) {
      throw unsupported("expected a Linear layer at " + prefix + std::to_string(pos) + " with '" +
                        std::string(between_name) + "' activations between layers");
    }
    Dense dense;
    dense.outputs = size_t(weight->shape()[0]);
    dense.inputs = size_t(weight->shape()[1]);
    if (!layers.empty() && dense.inputs != layers.back().outputs) {
      throw unsupported(prefix + std::to_string(pos) + ".weight takes " + std::to_string(dense.inputs) +
                        " inputs, but the layer before puts out " + std::to_string(layers.back().outputs));
    }
    dense.weight = weight->to_float32();
    if (const NdArray* bias = lookup(pos, "bias")) {
      if (bias->shape() != std::vector<uint64_t>{dense.outputs}) {
        throw unsupported(prefix + std::to_string(pos) + ".bias does not have " + std::to_string(dense.outputs) + " entries");
      }
      dense.bias = bias->to_float32();
    }
    ++used;
    ++pos;
    const NdArray* norm_weight = lookup(pos, "weight");
    if (norm_weight != nullptr && norm_weight->shape().size() == 1) {
      const NdArray* norm_bias = lookup(pos, "bias");
      const std::vector<uint64_t> size{dense.outputs};
      if (norm_weight->shape() != size || norm_bias == nullptr || norm_bias->shape() != size) {
        throw unsupported("expected a LayerNorm of size " + std::to_string(dense.outputs) + " at " + prefix +
                          std::to_string(pos));
      }
      dense.norm_weight = norm_weight->to_float32();
      dense.norm_bias = norm_bias->to_float32();
      ++used;
      ++pos;
    }
    const bool is_last = pos > end;
    dense.activation = is_last ? last : between;
    layers.push_back(std::move(dense));
    if (is_last) break;
    if (between != Activation::linear) ++pos;  // the activation's own slot
  }
  if (used != entries.size()) {
    throw unsupported("parameters under '" + prefix + "' are not laid out as Linear layers with '" +
                      std::string(between_name) + "' activations between them");
  }
  return layers;
}

Network Network::from_weights(const WeightSet& weights, std::string_view fcnet_activation,
                              std::string_view head_fcnet_activation, size_t num_actions) {
  return from_weights(weights, fcnet_activation, head_fcnet_activation, ActionSpace::discrete(num_actions));
}

Network Network::from_weights(const WeightSet& weights, std::string_view fcnet_activation,
                              std::string_view head_fcnet_activation, const ActionSpace& space) {
  std::vector<std::string_view> encoders;
  for (const auto& [name, array] : weights.params) {
    bool known = starts_with(name, kPiPrefix) || name == kPiLogStdClip || name == kPiLogStd;
    for (std::string_view prefix : kIgnoredPrefixes) known = known || starts_with(name, prefix);
    for (std::string_view prefix : kEncoderPrefixes) {
      if (!starts_with(name, prefix)) continue;
      known = true;
      if (std::find(encoders.begin(), encoders.end(), prefix) == encoders.end()) encoders.push_back(prefix);
    }
    if (!known) throw unsupported("unexpected parameter '" + name.substr(0, 80) + "'");
  }
  if (encoders.size() != 1) throw unsupported("expected MLP encoder parameters under exactly one of encoder.encoder.net.mlp. and encoder.actor_encoder.net.mlp.");

  const Activation activation = activation_named(fcnet_activation);
  const Activation head_activation = activation_named(head_fcnet_activation);
  Network network;
  network.layers_ = read_mlp(weights, std::string(encoders[0]), activation, fcnet_activation, activation);
  std::vector<Dense> pi = read_mlp(weights, std::string(kPiPrefix), head_activation, head_fcnet_activation,
                                   Activation::linear);
  if (pi.front().inputs != network.layers_.back().outputs) {
    throw unsupported("the encoder puts out " + std::to_string(network.layers_.back().outputs) +
                      " values but the pi head takes " + std::to_string(pi.front().inputs));
  }
  const size_t outputs = pi.back().outputs;
  for (Dense& dense : pi) network.layers_.push_back(std::move(dense));
  const NdArray* free_log_std = weights.find(kPiLogStd);
  if (!space.is_box()) {
    if (free_log_std != nullptr) throw unsupported("it has a free log-std ('pi.log_std'), which belongs to a Box action space, not " + space.str());
    if (outputs != space.n) {
      throw unsupported("the pi head puts out " + std::to_string(outputs) + " logits, but the action space " +
                        space.str() + " needs " + std::to_string(space.n));
    }
    return network;
  }
  const size_t size = space.size();
  if (free_log_std != nullptr && (outputs != size || free_log_std->shape() != std::vector<uint64_t>{size})) {
    throw unsupported("a pi head with " + std::to_string(outputs) + " outputs and a free log-std of " +
                      std::to_string(free_log_std->size()) + " values does not fit " + space.str());
  }
  if (free_log_std == nullptr && outputs != 2 * size) {
    throw unsupported("the pi head puts out " + std::to_string(outputs) + " values, but " + space.str() + " needs " +
                      std::to_string(2 * size) + " (mean and log-std)");
  }
  const NdArray* clip = weights.find(kPiLogStdClip);
  if (clip == nullptr || clip->size() != 1 || !clip->dtype().is_numeric()) {
    throw unsupported("a Box action space needs a one-number '" + std::string(kPiLogStdClip) + "'");
  }
  network.box_size_ = size;
  network.log_std_clip_ = float(clip->number(0));
  if (free_log_std != nullptr) {
    network.free_log_std_ = free_log_std->to_float32();
    for (float& x : network.free_log_std_) x = std::clamp(x, -network.log_std_clip_, network.log_std_clip_);
  }
  return network;
}

const std::vector<float>& Network::logits(const float* observation) {
  input_.assign(observation, observation + observation_size());
  for (const Dense& dense : layers_) {
    output_.assign(dense.outputs, 0.0f);
    for (size_t o = 0; o < dense.outputs; ++o) {
      const float* row = &dense.weight[o * dense.inputs];
      float sum = dense.bias.empty() ? 0.0f : dense.bias[o];
      for (size_t i = 0; i < dense.inputs; ++i) sum += row[i] * input_[i];
      output_[o] = sum;
    }
    if (!dense.norm_weight.empty()) {
      float mean = 0.0f, variance = 0.0f;
      for (float x : output_) mean += x;
      mean /= float(output_.size());
      for (float x : output_) variance += (x - mean) * (x - mean);
      variance /= float(output_.size());
      const float scale = 1.0f / std::sqrt(variance + kLayerNormEpsilon);
      for (size_t o = 0; o < output_.size(); ++o) {
        output_[o] = (output_[o] - mean) * scale * dense.norm_weight[o] + dense.norm_bias[o];
      }
    }
    activate(dense.activation, output_);
    std::swap(input_, output_);
  }
  if (!free_log_std_.empty()) {
    input_.insert(input_.end(), free_log_std_.begin(), free_log_std_.end());
  } else if (box_size_ > 0) {
    for (size_t i = box_size_; i < 2 * box_size_; ++i) input_[i] = std::clamp(input_[i], -log_std_clip_, log_std_clip_);
  }
  return input_;
}

}  // namespace rlinks
