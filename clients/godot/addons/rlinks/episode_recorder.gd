# The episodes of a game's agents in local mode, cut into the chunks
# EPISODES carries (PROTOCOL.md 7, the stacked form): one single-agent
# episode per agent, observations, actions, rewards, and the action_logp and
# action_dist_inputs PPO needs (7.3). take_chunks() hands over every step
# recorded since the last call and continues open episodes as new chunks
# with the same id (7.5).
extends Reference

const NdArray = preload("res://addons/rlinks/ndarray.gd")

var obs_dtype := "<f4"       # the observation space's dtype
var discrete := true         # Discrete actions (int64), else a Box (float32 rows)
var steps := 0               # steps recorded and not taken yet
var _open := {}              # env -> the chunk under way (a Dictionary of columns)
var _finished := []          # wire maps of chunks whose episode ended
var _rng := RandomNumberGenerator.new()


func _init() -> void:
	_rng.randomize()


func begin(env: int, obs: Array) -> void:
	"""A new episode on `env` starting at `obs` (one still open there is dropped: call end first)."""
	var id := ""
	for i in 16:
		id += "%02x" % _rng.randi_range(0, 255)
	_open[env] = _chunk(id, 0, obs)


func is_open(env: int) -> bool:
	return _open.has(env)


func step(env: int, action, logp: float, dist_inputs: Array, reward: float, obs: Array,
		terminated: bool, truncated: bool) -> void:
	"""The step `env` took with `action` (drawn with `logp` from `dist_inputs`): its reward and the next observation."""
	var chunk: Dictionary = _open[env]
	chunk.obs.append(obs)
	chunk.actions.append(action)
	chunk.rewards.append(reward)
	chunk.logp.append(logp)
	chunk.dist.append(dist_inputs)
	steps += 1
	if terminated or truncated:
		_finished.append(_wire(chunk, terminated, truncated))
		_open.erase(env)


func take_chunks() -> Array:
	"""Every chunk with steps: the finished ones and a cut of each open episode (continued as a new chunk)."""
	var out := _finished
	_finished = []
	for env in _open:
		var chunk: Dictionary = _open[env]
		if chunk.actions.empty():
			continue
		out.append(_wire(chunk, false, false))
		_open[env] = _chunk(chunk.id, chunk.t_started + chunk.actions.size(), chunk.obs[-1])
	steps = 0
	return out


func _chunk(id: String, t_started: int, first_obs: Array) -> Dictionary:
	return {"id": id, "t_started": t_started, "obs": [first_obs], "actions": [], "rewards": [], "logp": [], "dist": []}


func _wire(chunk: Dictionary, terminated: bool, truncated: bool) -> Dictionary:
	var steps_in: int = chunk.actions.size()
	var infos := []
	for i in steps_in + 1:
		infos.append({})
	var actions
	if discrete:
		actions = NdArray.new().setup("<i8", [steps_in], chunk.actions)
	else:
		actions = NdArray.new().setup("<f4", [steps_in, chunk.actions[0].size()], _flat(chunk.actions))
	return {
		"id_": chunk.id, "agent_id": null, "module_id": null, "multi_agent_episode_id": null,
		"observations": _buffer(NdArray.new().setup(obs_dtype, [steps_in + 1, chunk.obs[0].size()], _flat(chunk.obs))),
		"actions": _buffer(actions),
		"rewards": _buffer(NdArray.new().setup("<f4", [steps_in], chunk.rewards)),
		"infos": {"data": infos, "lookback": 0, "finalized": false, "space": null},
		"extra_model_outputs": {
			"action_logp": _buffer(NdArray.new().setup("<f4", [steps_in], chunk.logp)),
			"action_dist_inputs": _buffer(NdArray.new().setup("<f4", [steps_in, chunk.dist[0].size()], _flat(chunk.dist))),
		},
		"is_terminated": terminated, "is_truncated": truncated,
		"t_started": chunk.t_started, "t": chunk.t_started + steps_in,
		"_observation_space": null, "_action_space": null, "_start_time": null, "_last_step_time": null,
	}


static func _buffer(array) -> Dictionary:
	return {"data": array, "lookback": 0, "finalized": true, "space": null}


static func _flat(rows: Array) -> Array:
	var out := []
	for row in rows:
		out += row
	return out
