# What the addon's test scripts share: their --name=value arguments, and writing their findings as JSON.
extends Reference


static func args() -> Dictionary:
	var out := {}
	for arg in OS.get_cmdline_args():
		if arg.begins_with("--") and "=" in arg:
			out[arg.substr(2, arg.find("=") - 2)] = arg.substr(arg.find("=") + 1)
	return out


static func write_json(path: String, value) -> void:
	var file := File.new()
	file.open(path, File.WRITE)
	file.store_string(JSON.print(value))
	file.close()
