# RLlink's message types and the fields each must carry (PROTOCOL.md 5).
#
# check() is applied to every message this addon decodes: a known, current
# type with the fields its type needs, unknown fields left alone (that is how
# extensions travel). The names are Python's MessageType;
# tests/test_godot_addon.py holds this table to it.
extends Reference

#: Required fields per type: field -> the kinds it may be ("int", "bin", "map", "list", "str", "ndarray").
const REQUIRED = {
	"PING": {}, "PONG": {}, "GET_CONFIG": {}, "GET_STATE": {}, "GET_ENDPOINTS": {},
	"SET_CONFIG": {"config": ["bin", "map"]},
	"SET_STATE": {"state": ["map"]},
	"EPISODES": {"episodes": ["list"]},
	"EPISODES_AND_GET_STATE": {"episodes": ["list"]},
	"ERROR": {"code": ["str"], "message": ["str"]},
	"ACK": {"seq": ["int"]},
	"AUTH": {"proof": ["bin"]},
	"AUTH_OK": {"proof": ["bin"]},
	"ENDPOINTS": {"endpoints": ["list"]},
	"ACT": {"env": ["list"], "obs": ["ndarray", "list"], "reward": ["ndarray", "list"],
			"start": ["ndarray", "list"], "terminated": ["ndarray", "list"], "truncated": ["ndarray", "list"]},
	"ACTIONS": {"env": ["list"], "actions": ["ndarray", "list"], "weights_seq_no": ["int"]},
	"GET_MODULES": {"agents": ["list"]},
	"MODULES": {"modules": ["map"]},
	"SAMPLES": {"samples": ["list"]},
}
const OPTIONAL = {
	"PING": {"rlinks": ["map"]},
	"PONG": {"rlinks": ["map"]},
	"SET_CONFIG": {"rlinks_config": ["map"]},
	"SET_STATE": {"want_steps": ["int"]},
	"EPISODES": {"timesteps": ["int"], "seq": ["int"]},
	"EPISODES_AND_GET_STATE": {"timesteps": ["int"], "seq": ["int"]},
	"SAMPLES": {"seq": ["int"]},
}
#: RLlib's old API stack: recognised, always refused.
const OLD_API_TYPES = [
	"ACTION_SPACE", "OBSERVATION_SPACE", "GET_WORKER_ARGS", "GET_WEIGHTS", "REPORT_SAMPLES",
	"START_EPISODE", "GET_ACTION", "LOG_ACTION", "LOG_RETURNS", "END_EPISODE",
]

const NdArray = preload("res://addons/rlinks/ndarray.gd")


static func check(message) -> Dictionary:
	"""{} if `message` is a valid message, else {"code", "message"}.

	invalid_message: not a map, no str type, a required field missing or of
	the wrong kind, a negative int field, an episode that is not a map.
	unsupported_message: an unknown type or one of RLlib's old API stack.
	"""
	if typeof(message) != TYPE_DICTIONARY:
		return _refuse("invalid_message", "a message must be a msgpack map")
	var type = message.get("type")
	if typeof(type) != TYPE_STRING:
		return _refuse("invalid_message", "a message must have a str field 'type'")
	if type in OLD_API_TYPES:
		return _refuse("unsupported_message", "%s belongs to RLlib's old API stack" % type)
	if not REQUIRED.has(type):
		return _refuse("unsupported_message", "unknown message type '%s'" % type.substr(0, 64))
	for field in REQUIRED[type]:
		if not message.has(field):
			return _refuse("invalid_message", "%s: missing required field '%s'" % [type, field])
		var refused := _check_field(type, field, message[field], REQUIRED[type][field])
		if refused:
			return refused
	var optional: Dictionary = OPTIONAL.get(type, {})
	for field in optional:
		if message.has(field):
			var refused := _check_field(type, field, message[field], optional[field])
			if refused:
				return refused
	if type == "EPISODES" or type == "EPISODES_AND_GET_STATE":
		for episode in message.episodes:
			if typeof(episode) != TYPE_DICTIONARY:
				return _refuse("invalid_message", "%s: each episode must be a map" % type)
	return {}


static func _check_field(type: String, field: String, value, kinds: Array) -> Dictionary:
	for kind in kinds:
		if _is_kind(value, kind):
			if kind == "int" and value < 0:
				return _refuse("invalid_message", "%s: field '%s' must not be negative" % [type, field])
			return {}
	return _refuse("invalid_message", "%s: field '%s' must be %s" % [type, field, PoolStringArray(kinds).join(" or ")])


static func _is_kind(value, kind: String) -> bool:
	match kind:
		"int": return typeof(value) == TYPE_INT
		"bin": return typeof(value) == TYPE_RAW_ARRAY
		"map": return typeof(value) == TYPE_DICTIONARY
		"list": return typeof(value) == TYPE_ARRAY
		"str": return typeof(value) == TYPE_STRING
		"ndarray": return value is NdArray and not value.scalar
	return false


static func _refuse(code: String, text: String) -> Dictionary:
	return {"code": code, "message": text}
