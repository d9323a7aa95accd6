# RLinksSync: trains a game's agents with a learner over RLlink.
#
# Put one in the scene beside the agents (nodes of the "AGENT" group:
# RLinksAIController2D). On its first physics frame it connects to the
# learner (waiting up to connect_wait for one that is not up yet), reads the
# spaces and the model from SET_CONFIG, and speeds the engine up. Then, every
# `action_repeat` physics frames, it reads each agent's observation, reward
# and end, and hands each agent its next action:
#
# - inference "served" (the default): one ACT for all agents per decision,
#   the runner computes the actions (PROTOCOL.md 10.5); the game runs no
#   network and sends no episodes: the runner records them.
# - inference "local": RLlib's default MLP runs here (mlp_policy.gd); the
#   episodes go to the runner in batches of the steps it asks for
#   (EPISODES_AND_GET_STATE, then the next weights; PROTOCOL.md 6.3).
#
# Command-line arguments override the exported settings (Godot passes on
# arguments it does not know): --rlinks-address=HOST:PORT (or
# $RLINKS_ADDRESS), --rlinks-inference=served|local, --rlinks-speedup=N,
# --rlinks-max-steps=N (stop after N env steps, for benchmarks). The game
# quits when the learner ends the run (exit 0) or on an error (exit 1,
# with a line saying why); a served game whose connection dropped connects
# again first (within connect_wait) and plays on.
extends Node

const Client = preload("res://addons/rlinks/client.gd")
const MlpPolicy = preload("res://addons/rlinks/mlp_policy.gd")
const EpisodeRecorder = preload("res://addons/rlinks/episode_recorder.gd")
const NdArray = preload("res://addons/rlinks/ndarray.gd")

#: The extensions asked for: served actions and the runner's step counts, confirmed batches.
const EXTENSIONS = ["served_actions", "want_steps", "ack"]

export var address := "127.0.0.1:5555"
export(String, "served", "local") var inference := "served"
#: Physics frames per decision (Godot RL Agents' action_repeat).
export var action_repeat := 1
#: How much faster than real time the engine runs while training (Engine.time_scale).
export var speed_up := 32.0
#: Seconds to keep trying a learner that is not up yet; below 0: $RLINKS_CONNECT_WAIT_S, else 60.
export var connect_wait := -1.0
#: Quit the game when the learner ends the run or the connection fails.
export var quit_when_done := true

var agents := []
var env_steps := 0            # decisions completed, summed over agents
var client
var _policy                   # local inference
var _recorder                 # local inference
var _obs_size := 0
var _obs_dtype := "<f4"
var _action_space := {}
var _on_policy := true
var _want_steps := 0
var _started := false
var _stopped := false
var _frame := 0
var _max_steps := 0
var _started_ms := 0
var _playing := {}            # env -> true once its first episode started (served inference)
var _last_actions := {}       # env -> {"action", "logp", "dist"}: local inference's last draw per agent
var _activations := ["tanh", "relu"]  # the model's fcnet_activation and head_fcnet_activation


func _ready() -> void:
	for arg in OS.get_cmdline_args():
		var eq: int = arg.find("=")
		if eq < 0:
			continue
		var value: String = arg.substr(eq + 1)
		match arg.substr(0, eq):
			"--rlinks-address": address = value
			"--rlinks-inference": inference = value
			"--rlinks-speedup": speed_up = float(value)
			"--rlinks-max-steps": _max_steps = int(value)
	if OS.get_environment("RLINKS_ADDRESS") != "" and not "--rlinks-address" in str(OS.get_cmdline_args()):
		address = OS.get_environment("RLINKS_ADDRESS")


func _physics_process(_delta: float) -> void:
	if _stopped:
		return
	if not _started:
		_started = true
		if not _start():
			return
	_frame += 1
	if _frame % action_repeat != 0:
		return
	var ok: bool = _served_step() if inference == "served" else _local_step()
	if not ok:
		_stop()
	elif _max_steps > 0 and env_steps >= _max_steps:
		_stop()


func _start() -> bool:
	"""Connect, read the learner's setup, check the agents against it, speed the engine up."""
	agents = get_tree().get_nodes_in_group("AGENT")
	if agents.empty():
		return _give_up("no agents: put RLinksAIController2D nodes (group \"AGENT\") in the scene")
	if not inference in ["served", "local"]:
		return _give_up("inference must be served or local, not '%s'" % inference)
	var host := address.rsplit(":", true, 1)[0]
	var port := int(address.rsplit(":", true, 1)[-1])
	client = Client.new()
	var wait: float = connect_wait if connect_wait >= 0.0 else Client.connect_wait_s()
	print("rlinks: connecting to %s (%d agents, %s inference)" % [address, agents.size(), inference])
	if not client.open(host, port, EXTENSIONS, wait):
		return _stop()
	if inference == "served" and not "served_actions" in client.agreed:
		return _give_up("the learner does not serve actions (its runners need served_actions on and RLlib's default MLP)")
	var reply = client.request({"type": "GET_CONFIG"}, "SET_CONFIG")
	if reply == null:
		return _stop()
	var config = reply.config if typeof(reply.config) == TYPE_DICTIONARY else reply.get("rlinks_config")
	if typeof(config) != TYPE_DICTIONARY:
		return _give_up("the learner sent only RLlib's pickled config; rlinks' runner sends a description")
	var obs_space: Dictionary = config.observation_space
	_action_space = config.action_space
	if obs_space.get("kind") != "box":
		return _give_up("this addon sends Box observations; the learner's space is %s" % obs_space.get("kind"))
	_obs_dtype = obs_space.get("dtype", "<f4")
	_obs_size = 1
	for dim in obs_space.shape:
		_obs_size *= int(dim)
	for agent in agents:
		var size := _observe(agent).size()
		if size != _obs_size:
			return _give_up("%s.get_obs() gives %d numbers; the learner's observation space holds %d"
					% [agent.get_path(), size, _obs_size])
	_on_policy = config.get("on_policy", true)
	_want_steps = int(config.get("rollout_fragment_length", 1))
	if inference == "local" and not _start_local(config):
		return false
	var physics_fps: int = ProjectSettings.get_setting("physics/common/physics_fps")
	Engine.iterations_per_second = int(physics_fps * speed_up)
	Engine.time_scale = speed_up
	# A headless engine (godot3-server) can't draw, so Godot 3 sleeps this long after every frame
	# (6,900 us by default): at most 8 physics steps per frame, about 1,100 a second. Training needs none.
	OS.low_processor_usage_mode_sleep_usec = 0
	_started_ms = OS.get_ticks_msec()
	return true


func _start_local(config: Dictionary) -> bool:
	var reply = client.request({"type": "GET_STATE"}, "SET_STATE")
	if reply == null:
		return _stop()
	var model: Dictionary = config.get("model_config", {})
	_activations = [_activation(model.get("fcnet_activation", "tanh")), _activation(model.get("head_fcnet_activation", "relu"))]
	_policy = MlpPolicy.new()
	if not _load(reply):
		return false
	_recorder = EpisodeRecorder.new()
	_recorder.obs_dtype = _obs_dtype
	_recorder.discrete = _policy.discrete
	return true


func _served_step() -> bool:
	"""One ACT for every agent: its observation, the reward for its last action, and ends and starts."""
	var rows := {"env": [], "obs": [], "reward": [], "start": [], "terminated": [], "truncated": []}
	for i in agents.size():
		var agent = agents[i]
		if not _playing.has(i):  # its first decision: start its first episode
			_playing[i] = true
			agent.reset()
			_row(rows, i, _observe(agent), 0.0, true, false, false)
			continue
		var ended := _complete_step(agent)
		_row(rows, i, _observe(agent), agent.get_reward(), false, ended[0], ended[1])
		agent.zero_reward()
		if ended[0] or ended[1]:
			agent.reset()
			_row(rows, i, _observe(agent), 0.0, true, false, false)
	var k: int = rows.env.size()
	var act := {
		"type": "ACT", "env": rows.env,
		"obs": NdArray.new().setup(_obs_dtype, [k, _obs_size], rows.obs),
		"reward": NdArray.new().setup("<f4", [k], rows.reward),
		"start": NdArray.new().setup("|b1", [k], rows.start),
		"terminated": NdArray.new().setup("|b1", [k], rows.terminated),
		"truncated": NdArray.new().setup("|b1", [k], rows.truncated),
	}
	var reply = client.request(act, "ACTIONS")
	if reply == null:
		return _served_again()
	var actions = reply.actions
	var values: Array = actions.values if actions is NdArray else actions
	var width: int = values.size() / max(1, reply.env.size())
	for j in reply.env.size():
		var env: int = reply.env[j]
		if env < 0 or env >= agents.size():
			return _give_up("ACTIONS named env %d; this game has %d agents" % [env, agents.size()])
		agents[env].set_action(values[j] if _action_space.kind == "discrete" else values.slice(j * width, j * width + width - 1))
	return true


func _served_again() -> bool:
	"""After a dropped connection: connect again; the next decision starts every agent's next episode
	(the runner has closed the open ones as truncated), the agents keep their last action until then.
	False, with the reason kept, for any other failure or when no learner answers within connect_wait."""
	if not client.dropped():
		return false
	print("rlinks: %s: %s; connecting again" % [client.code, client.message])
	if not client.reopen():
		return false
	_playing.clear()
	return true


func _local_step() -> bool:
	"""Record each agent's step, send the batch when the runner's share is full, then draw the next actions."""
	for i in agents.size():
		var agent = agents[i]
		if not _recorder.is_open(i):
			agent.reset()
			_recorder.begin(i, _observe(agent))
			continue
		var ended := _complete_step(agent)
		var drawn: Dictionary = _last_actions[i]
		_recorder.step(i, drawn.action, drawn.logp, drawn.dist, agent.get_reward(), _observe(agent), ended[0], ended[1])
		agent.zero_reward()
		if ended[0] or ended[1]:
			agent.reset()
			_recorder.begin(i, _observe(agent))
		if _recorder.steps >= _want_steps and not _send_batch():
			return false
	for i in agents.size():
		var dist: Array = _policy.dist_inputs(_observe(agents[i]))
		var drawn: Dictionary = _policy.sample(dist)
		drawn["dist"] = dist
		_last_actions[i] = drawn
		agents[i].set_action(drawn.action if _policy.discrete else _for_env(drawn.action))
	return true


func _send_batch() -> bool:
	var episodes: Array = _recorder.take_chunks()
	var steps := 0
	for chunk in episodes:
		steps += chunk.t - chunk.t_started
	if not _on_policy:
		return client.send_batch("EPISODES", {"episodes": episodes, "timesteps": steps}) \
				and _load(client.request({"type": "GET_STATE"}, "SET_STATE"))
	return _load(client.send_batch("EPISODES_AND_GET_STATE", {"episodes": episodes, "timesteps": steps}))


func _load(reply) -> bool:
	if reply == null:
		return false
	var model = reply.state.get("rl_module", {})
	var refused: String = _policy.load(model, _action_space, _activations[0], _activations[1])
	if refused != "":
		return _give_up("can't run the learner's module here: %s (served inference can)" % refused)
	_want_steps = int(reply.get("want_steps", _want_steps))
	return true


static func _activation(name) -> String:
	"""An activation as RLlib's model config names it; none (null) is linear."""
	return "linear" if name == null else str(name)


func _complete_step(agent) -> Array:
	"""[terminated, truncated] of the step the agent just completed (counting it)."""
	agent.n_steps += 1
	env_steps += 1
	var terminated: bool = agent.get_done()
	return [terminated, not terminated and agent.n_steps >= agent.reset_after]


func _observe(agent) -> Array:
	var obs = agent.get_obs()
	if typeof(obs) == TYPE_DICTIONARY:  # Godot RL Agents' {"obs": [...]}
		obs = obs.get("obs", [])
	return Array(obs)


func _row(rows: Dictionary, env: int, obs: Array, reward: float, start: bool, terminated: bool, truncated: bool) -> void:
	rows.env.append(env)
	rows.obs += obs
	rows.reward.append(reward)
	rows.start.append(start)
	rows.terminated.append(terminated)
	rows.truncated.append(truncated)


func _for_env(action: Array) -> Array:
	"""A Box action as the game applies it: unsquashed from [-1, 1] to the bounds (RLlib's normalize_actions)."""
	var low: Array = _action_space.low.values
	var high: Array = _action_space.high.values
	var out := []
	for i in action.size():
		var lo: float = low[i if low.size() > 1 else 0]
		var hi: float = high[i if high.size() > 1 else 0]
		out.append(clamp(lo + (action[i] + 1.0) * (hi - lo) / 2.0, lo, hi))
	return out


func _give_up(why: String) -> bool:
	printerr("rlinks: " + why)
	_stopped = true
	if quit_when_done:
		get_tree().quit(1)
	return false


func _stop() -> bool:
	"""Stop training: the learner ended the run (exit 0), a limit was reached (0) or the connection failed (1)."""
	_stopped = true
	var seconds := (OS.get_ticks_msec() - _started_ms) / 1000.0
	print("rlinks: %d env steps in %.1f s (%.0f steps/s, %s inference)"
			% [env_steps, seconds, env_steps / max(seconds, 0.001), inference])
	var failed: bool = client != null and client.code != "" and client.code != "shutting_down"
	if client != null and client.code == "shutting_down":
		print("rlinks: the learner ended the run")
	elif failed:
		printerr("rlinks: %s: %s" % [client.code, client.message])
	if client != null:
		client.close()
	if quit_when_done:
		get_tree().quit(1 if failed else 0)
	return false
