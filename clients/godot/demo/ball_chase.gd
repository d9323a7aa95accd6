# The demo: chasers in a walled arena, trained by the learner through RLinksSync.
# --agents=N (default 4) chasers share the arena (they pass through each other).
extends Node2D

const Chaser = preload("res://demo/chaser.tscn")


func _ready() -> void:
	var count := 4
	for arg in OS.get_cmdline_args():
		if arg.begins_with("--agents="):
			count = int(arg.substr("--agents=".length()))
	for i in count:
		var chaser = Chaser.instance()
		chaser.name = "Chaser%d" % i
		add_child(chaser)
