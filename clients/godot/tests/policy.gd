# Runs the addon's MLP (mlp_policy.gd) on the cases of tests/vectors/policy/:
# mlp.json (weights and observations -> distribution inputs; weights that
# don't fit the action space -> refused) and logp.json
# (distribution inputs and an action -> its log-probability). Writes what it
# computed as JSON for tests/test_godot_addon.py to compare:
#   godot3-server --no-window --path clients/godot -s res://tests/policy.gd --vectors=DIR --out=FILE
extends SceneTree

const Support = preload("res://tests/support.gd")

const MlpPolicy = preload("res://addons/rlinks/mlp_policy.gd")
const NdArray = preload("res://addons/rlinks/ndarray.gd")


func _init():
	var args := Support.args()
	var out := {"mlp": {}, "logp": []}
	var mlp := _read(args["vectors"].plus_file("mlp.json"))
	var params_of := {}
	for case in mlp.cases:
		var params := {}
		for name in case.params:
			var shape := []
			for dim in case.params[name].shape:
				shape.append(int(dim))
			params[name] = NdArray.new().setup("<f4", shape, case.params[name].data)
		params_of[case.name] = params
		var policy = MlpPolicy.new()
		var refused: String = policy.load(params, _space(case.action_space), case.fcnet_activation, case.head_fcnet_activation)
		var rows := []
		if refused == "":
			for obs in case.observations:
				rows.append(policy.dist_inputs(obs))
		out.mlp[case.name] = {"refused": refused, "dist_inputs": rows}
	out["refused"] = {}
	for case in mlp.refused:  # weights that do not fit the action space: each must be refused
		var params: Dictionary = params_of[case.params_of].duplicate()
		for name in case.drop:
			params.erase(name)
		out.refused[case.name] = MlpPolicy.new().load(params, _space(case.action_space), "tanh", "relu")
	for case in _read(args["vectors"].plus_file("logp.json")).cases:
		var policy = MlpPolicy.new()
		var space := _space(case.action_space)
		policy.discrete = space.kind == "discrete"
		policy.action_size = int(space.get("n", 0)) if policy.discrete else int(space.shape[0])
		var action = int(case.action) if policy.discrete else case.action
		out.logp.append(policy.logp(case.dist_inputs, action))
	Support.write_json(args["out"], out)
	quit(0)


func _read(path: String) -> Dictionary:
	var file := File.new()
	file.open(path, File.READ)
	var parsed = JSON.parse(file.get_as_text()).result
	file.close()
	return parsed


func _space(space: Dictionary) -> Dictionary:
	# JSON numbers arrive as floats; a Discrete's n and a Box's shape are ints.
	var out := space.duplicate()
	if out.has("n"):
		out.n = int(out.n)
	if out.has("shape"):
		var shape := []
		for dim in out.shape:
			shape.append(int(dim))
		out.shape = shape
	return out
