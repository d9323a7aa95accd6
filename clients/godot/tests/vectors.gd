# Replays every test vector of tests/vectors/ through the addon's framing,
# codec and message checks (PROTOCOL.md 13), in one piece, byte by byte and
# in pieces of 7, and re-encodes what it decoded. Writes what it found as
# JSON for tests/test_godot_addon.py, which compares it with each vector's
# .json and .bin:
#   godot3-server --no-window --path clients/godot -s res://tests/vectors.gd --vectors=DIR --out=FILE
extends SceneTree

const Support = preload("res://tests/support.gd")

const Framing = preload("res://addons/rlinks/framing.gd")
const Codec = preload("res://addons/rlinks/codec.gd")


func _init():
	var args := Support.args()
	var results := {}
	var dir := Directory.new()
	if dir.open(args["vectors"]) != OK:
		printerr("can't open ", args["vectors"])
		quit(2)
		return
	dir.list_dir_begin(true)
	var name := dir.get_next()
	while name != "":
		if name.ends_with(".bin"):
			var stem := name.get_basename()
			results[stem] = _replay_vector(args["vectors"].plus_file(stem))
		name = dir.get_next()
	Support.write_json(args["out"], results)
	quit(0)


func _replay_vector(path: String) -> Dictionary:
	var file := File.new()
	file.open(path + ".bin", File.READ)
	var bytes := file.get_buffer(file.get_len())
	file.close()
	file.open(path + ".json", File.READ)
	var spec: Dictionary = JSON.parse(file.get_as_text()).result
	file.close()
	var passes := []
	var reencoded := PoolByteArray()
	for piece in [max(bytes.size(), 1), 1, 7]:
		var framing = Framing.new()
		framing.max_frame_bytes = int(spec["max_frame_bytes"])
		var messages := []
		var when = null
		var pos := 0
		while pos < bytes.size():
			messages += framing.feed(bytes.subarray(pos, min(pos + piece, bytes.size()) - 1))
			if framing.code != "":
				when = "feed"
				break
			pos += piece
		if when == null and not framing.eof():
			when = "eof"
		passes.append({"code": framing.code if framing.code != "" else null, "when": when,
				"messages": messages.size(), "error": framing.message})
		if piece == max(bytes.size(), 1):
			var codec = Codec.new()
			for message in messages:
				reencoded.append_array(Framing.frame(codec.encode(message)))
	return {"passes": passes, "reencoded": reencoded.hex_encode()}
