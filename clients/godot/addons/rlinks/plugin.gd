# Registers the addon's two nodes in the editor's "Create Node" dialog.
tool
extends EditorPlugin


func _enter_tree():
	add_custom_type("RLinksSync", "Node", preload("res://addons/rlinks/sync.gd"), null)
	add_custom_type("RLinksAIController2D", "Node2D", preload("res://addons/rlinks/ai_controller_2d.gd"), null)


func _exit_tree():
	remove_custom_type("RLinksSync")
	remove_custom_type("RLinksAIController2D")
