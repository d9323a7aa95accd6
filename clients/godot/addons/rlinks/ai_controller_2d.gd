# RLinksAIController2D: one agent of a game, in Godot RL Agents' shape.
#
# Put one under each thing that learns (a player, a car, a ball) and fill in
# the four methods Godot RL Agents' AIController2D has: get_obs,
# get_reward (or add to `reward`), set_action, and reset. The game sets
# `done` when the episode ends by its rules (terminated); RLinksSync ends it
# as truncated after `reset_after` actions, then calls reset() and starts
# the next one. The learner's config says the spaces: get_obs returns as
# many numbers as its observation space holds, set_action receives an int
# (Discrete) or an Array of floats (Box).
extends Node2D

#: Emitted by reset(): connect the game's own reset to it instead of overriding reset().
signal episode_reset

#: Actions after which the episode is truncated (Godot RL Agents' reset_after).
export var reset_after := 1000

#: The reward since the last action; RLinksSync reads it with get_reward() and zeroes it.
var reward := 0.0
#: Set by the game when the episode ends by its rules.
var done := false
#: Actions taken in this episode (counted by RLinksSync).
var n_steps := 0


func _enter_tree() -> void:
	add_to_group("AGENT")


func get_obs():
	"""The observation now: an Array of numbers, or Godot RL's {"obs": Array}. Override this."""
	push_error("%s: RLinksAIController2D.get_obs() must be overridden" % get_path())
	return []


func get_reward() -> float:
	"""The reward since the last action; the default returns `reward`."""
	return reward


func set_action(_action) -> void:
	"""Apply the action the policy chose: an int for a Discrete space, an Array of floats for a Box. Override this."""
	push_error("%s: RLinksAIController2D.set_action() must be overridden" % get_path())


func reset() -> void:
	"""Start a new episode: clears the counters, then emits episode_reset. An override calls .reset()."""
	n_steps = 0
	reward = 0.0
	done = false
	emit_signal("episode_reset")


func zero_reward() -> void:
	reward = 0.0


func get_done() -> bool:
	return done
