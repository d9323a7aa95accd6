# The chaser's agent, as a Godot RL Agents user writes one: what it sees, and what an action does.
extends "res://addons/rlinks/ai_controller_2d.gd"

onready var ball = get_parent()


func get_obs():
	# Where the target is and how fast the ball goes, scaled to about [-1, 1] (the learner's Box(-2, 2, (4,))).
	var to_target: Vector2 = (ball.target - ball.position) / (ball.ARENA * 0.5)
	var speed: Vector2 = ball.velocity / ball.MAX_SPEED
	return [to_target.x, to_target.y, speed.x, speed.y]


func set_action(action) -> void:
	ball.direction = ball.DIRECTIONS[action]
