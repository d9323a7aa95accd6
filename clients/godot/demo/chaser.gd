# A ball that chases a target around the arena, on Godot's own physics: a
# KinematicBody2D that accelerates in the direction its controller chose and
# slides along the walls (move_and_slide). Reaching the target scores 1 and
# moves the target; getting closer or farther scores a little either way.
extends KinematicBody2D

#: The arena's inner size in pixels (ball_chase.tscn's walls enclose it, from the origin).
const ARENA = Vector2(600, 400)
const ACCELERATION = 1500.0      # px/s^2
const MAX_SPEED = 400.0          # px/s
const CATCH_DISTANCE = 30.0      # px from the ball's centre to the target
#: Reward per pixel of distance gained towards the target (a whole crossing of the arena is about 1).
const PROGRESS_REWARD = 1.0 / 600.0
#: The directions an action picks: none, up, down, left, right (the learner's Discrete(5)).
const DIRECTIONS = [Vector2.ZERO, Vector2.UP, Vector2.DOWN, Vector2.LEFT, Vector2.RIGHT]

var velocity := Vector2.ZERO
var direction := Vector2.ZERO
var target := Vector2.ZERO
var catches := 0
var _rng := RandomNumberGenerator.new()
onready var controller = $AIController


func _ready() -> void:
	_rng.randomize()
	controller.connect("episode_reset", self, "_on_episode_reset")


func _physics_process(delta: float) -> void:
	var before := position.distance_to(target)
	velocity = (velocity + direction * ACCELERATION * delta).clamped(MAX_SPEED)
	velocity = move_and_slide(velocity)
	var after := position.distance_to(target)
	controller.reward += (before - after) * PROGRESS_REWARD
	if after < CATCH_DISTANCE:
		controller.reward += 1.0
		catches += 1
		target = _random_point()
	update()


func _on_episode_reset() -> void:
	position = _random_point()
	velocity = Vector2.ZERO
	direction = Vector2.ZERO
	target = _random_point()
	catches = 0


func _random_point() -> Vector2:
	var margin := 40.0
	return Vector2(_rng.randf_range(margin, ARENA.x - margin), _rng.randf_range(margin, ARENA.y - margin))


func _draw() -> void:
	draw_circle(Vector2.ZERO, 16.0, Color(0.2, 0.6, 1.0))
	draw_circle(target - position, 8.0, Color(1.0, 0.4, 0.2))
