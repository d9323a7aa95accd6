# RLlib's default MLP RLModule (PPO, APPO, IMPALA on a vector observation)
# run in GDScript: the local option, for a game that computes its own actions.
#
# The actor's forward pass, read from the parameter names of SET_STATE's
# weight set (PROTOCOL.md 8): the encoder (encoder.actor_encoder.net.mlp.*,
# or encoder.encoder.net.mlp.* with shared layers), every layer followed by
# fcnet_activation; then the pi head (pi.net.mlp.*), head_fcnet_activation
# between its layers and none after the last. A 1-D weight after a Linear
# is its LayerNorm. A Box's log-std half is clamped to
# pi.log_std_clip_param_const (or is the free pi.log_std). The same
# computation as the Python client's rlinks_rllib/client/policies/mlp.py, held to
# tests/vectors/policy/mlp.json. load() returns "" or why the weights are
# not such a module.
extends Reference

const NdArray = preload("res://addons/rlinks/ndarray.gd")

const ENCODER_PREFIXES = ["encoder.encoder.net.mlp.", "encoder.actor_encoder.net.mlp."]
const PI_PREFIX = "pi.net.mlp."
const LAYER_NORM_EPSILON = 1e-3  # RLlib's TorchMLP builds nn.LayerNorm(eps=0.001)
const ACTIVATIONS = ["linear", "tanh", "relu", "elu", "sigmoid", "silu", "swish"]
const HALF_LOG_2PI = 0.9189385332046727

var encoder := []         # layers: {"w": PoolRealArray (out*in), "b", "in", "out", "norm_w", "norm_b", "act"}
var pi := []
var log_std_clip = null   # float for a Box of PPO's family
var free_log_std = null   # Array, with free_log_std
var discrete := true
var action_size := 0      # n of a Discrete, the size of a Box
var observation_size := 0
var _rng := RandomNumberGenerator.new()


func _init() -> void:
	_rng.randomize()


func load(params: Dictionary, action_space: Dictionary, fcnet_activation: String, head_fcnet_activation: String) -> String:
	"""Read the network from a weight set's rl_module map; "" when it is one, else why not."""
	log_std_clip = null
	free_log_std = null
	if params.has("default_policy") and typeof(params.default_policy) == TYPE_DICTIONARY:
		params = params.default_policy
	for name in [fcnet_activation, head_fcnet_activation]:
		if not name.to_lower() in ACTIVATIONS:
			return "activation '%s' is not one this addon knows (%s)" % [name, PoolStringArray(ACTIVATIONS).join(", ")]
	var prefix := ""
	for candidate in ENCODER_PREFIXES:
		for name in params:
			if name.begins_with(candidate):
				prefix = candidate
	if prefix == "":
		return "no encoder layers (%s): not RLlib's default MLP module" % PoolStringArray(ENCODER_PREFIXES).join(" or ")
	encoder = _read_layers(params, prefix, fcnet_activation.to_lower(), fcnet_activation.to_lower())
	pi = _read_layers(params, PI_PREFIX, head_fcnet_activation.to_lower(), "linear")
	if encoder.empty() or pi.empty():
		return "the encoder or the pi head has no Linear layer"
	for layers in [encoder, pi]:
		for i in range(1, layers.size()):
			if layers[i]["in"] != layers[i - 1]["out"]:
				return "layer %d takes %d inputs, the one before puts out %d" % [i, layers[i]["in"], layers[i - 1]["out"]]
	if pi[0]["in"] != encoder[-1]["out"]:
		return "the encoder puts out %d values but the pi head takes %d" % [encoder[-1]["out"], pi[0]["in"]]
	observation_size = encoder[0]["in"]
	discrete = action_space.get("kind") == "discrete"
	var out: int = pi[-1]["out"]
	if discrete:
		action_size = int(action_space.get("n", 0))
		if out != action_size or params.has("pi.log_std"):
			return "a pi head with %d outputs%s does not fit Discrete(%d)" \
					% [out, " and a free log-std" if params.has("pi.log_std") else "", action_size]
		return ""
	action_size = 1
	for dim in action_space.get("shape", []):
		action_size *= int(dim)
	if params.has("pi.log_std"):
		free_log_std = params["pi.log_std"].values
	if not params.has("pi.log_std_clip_param_const"):
		return "a Box action space but no 'pi.log_std_clip_param_const'"
	log_std_clip = float(params["pi.log_std_clip_param_const"].values[0])
	var wanted := action_size if free_log_std != null else 2 * action_size
	if out != wanted:
		return "a pi head with %d outputs does not fit a Box of size %d" % [out, action_size]
	return ""


func _read_layers(params: Dictionary, prefix: String, between: String, last: String) -> Array:
	var indices := []
	for name in params:
		if name.begins_with(prefix) and name.ends_with(".weight"):
			indices.append(int(name.substr(prefix.length()).split(".")[0]))
	indices.sort()
	var layers := []
	for index in indices:
		var weight = params["%s%d.weight" % [prefix, index]]
		var bias = params.get("%s%d.bias" % [prefix, index])
		if weight.shape.size() == 1 and not layers.empty():  # a LayerNorm after the Linear before it
			layers[-1]["norm_w"] = PoolRealArray(weight.values)
			layers[-1]["norm_b"] = PoolRealArray(bias.values) if bias != null else null
			continue
		layers.append({"w": PoolRealArray(weight.values), "b": PoolRealArray(bias.values) if bias != null else null,
				"out": weight.shape[0], "in": weight.shape[1], "norm_w": null, "norm_b": null, "act": between})
	if not layers.empty():
		layers[-1]["act"] = last
	return layers


func dist_inputs(obs: Array) -> Array:
	"""The action distribution's inputs for one observation: logits, or means and log-stds."""
	var x := _run(pi, _run(encoder, obs))
	if discrete or log_std_clip == null:
		return x
	if free_log_std != null:
		for v in free_log_std:
			x.append(clamp(v, -log_std_clip, log_std_clip))
		return x
	for i in range(action_size, 2 * action_size):
		x[i] = clamp(x[i], -log_std_clip, log_std_clip)
	return x


func sample(inputs: Array) -> Dictionary:
	"""Draw an action from the distribution: {"action": int or Array (as recorded), "logp": float}."""
	var action
	if discrete:
		var top: float = inputs.max()
		var total := 0.0
		for v in inputs:
			total += exp(v - top)
		var u := _rng.randf() * total
		action = inputs.size() - 1
		var cumulative := 0.0
		for i in inputs.size():
			cumulative += exp(inputs[i] - top)
			if u < cumulative:
				action = i
				break
	else:
		action = []
		for i in action_size:
			action.append(inputs[i] + exp(inputs[action_size + i]) * _rng.randfn())
	return {"action": action, "logp": logp(inputs, action)}


func logp(inputs: Array, action) -> float:
	"""The log-probability of `action` (an int, or a Box row before for_env) under the distribution `inputs`."""
	if discrete:
		var top: float = inputs.max()
		var total := 0.0
		for v in inputs:
			total += exp(v - top)
		return inputs[action] - top - log(total)
	var out := 0.0
	for i in action_size:
		var log_std: float = inputs[action_size + i]
		var z: float = (action[i] - inputs[i]) / exp(log_std)
		out += -0.5 * z * z - log_std - HALF_LOG_2PI
	return out


func _run(layers: Array, x: Array) -> Array:
	for layer in layers:
		var w: PoolRealArray = layer["w"]
		var n_in: int = layer["in"]
		var y := []
		y.resize(layer["out"])
		for o in layer["out"]:
			var acc: float = layer["b"][o] if layer["b"] != null else 0.0
			var base: int = o * n_in
			for i in n_in:
				acc += w[base + i] * x[i]
			y[o] = acc
		if layer["norm_w"] != null:
			_layer_norm(y, layer["norm_w"], layer["norm_b"])
		if layer["act"] != "linear":
			_activate(y, layer["act"])
		x = y
	return x


func _layer_norm(y: Array, weight: PoolRealArray, bias) -> void:
	var mean := 0.0
	for v in y:
		mean += v
	mean /= y.size()
	var variance := 0.0
	for v in y:
		variance += (v - mean) * (v - mean)
	variance /= y.size()
	var scale := 1.0 / sqrt(variance + LAYER_NORM_EPSILON)
	for i in y.size():
		y[i] = (y[i] - mean) * scale * weight[i] + (bias[i] if bias != null else 0.0)


func _activate(y: Array, name: String) -> void:
	for i in y.size():
		var v: float = y[i]
		match name:
			"tanh": y[i] = tanh(v)
			"relu": y[i] = max(v, 0.0)
			"elu": y[i] = v if v > 0.0 else exp(v) - 1.0
			"sigmoid": y[i] = 0.5 * (1.0 + tanh(0.5 * v))
			"silu", "swish": y[i] = v * 0.5 * (1.0 + tanh(0.5 * v))
