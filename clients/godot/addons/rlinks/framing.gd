# RLlink's framing (PROTOCOL.md 2): 8 ASCII digits of body length, then the
# msgpack body; fed bytes in any pieces, it gives whole, checked messages.
#
# feed() returns the messages completed by the bytes given. On the first
# error it stops for good: `code` (bad_frame, frame_too_large, or the
# codec's and messages.gd's codes) and `message` are set, and the messages
# completed before the error are still returned. eof() says whether the
# stream may end here (not inside a frame).
extends Reference

const Codec = preload("res://addons/rlinks/codec.gd")
const Messages = preload("res://addons/rlinks/messages.gd")

const HEADER_BYTES = 8
#: The default frame limit (PROTOCOL.md 12): 64 MiB.
const MAX_FRAME_BYTES = 67108864

var code := ""
var message := ""
var max_frame_bytes := MAX_FRAME_BYTES
var _codec = Codec.new()
var _pending := PoolByteArray()
var _body_bytes := -1     # the body length of the frame under way, -1 while its header is incomplete


func feed(data: PoolByteArray) -> Array:
	var out := []
	if code != "":
		return out
	_pending.append_array(data)
	var pos := 0
	while code == "":
		if _body_bytes < 0:
			var have: int = min(_pending.size() - pos, HEADER_BYTES)
			for i in have:  # refuse a bad header byte as soon as it arrives
				var c: int = _pending[pos + i]
				if c < 0x30 or c > 0x39:
					_fail("bad_frame", "frame header is not 8 ASCII digits")
					break
			if code != "" or have < HEADER_BYTES:
				break
			_body_bytes = int(_pending.subarray(pos, pos + HEADER_BYTES - 1).get_string_from_ascii())
			pos += HEADER_BYTES
			if _body_bytes == 0:
				_fail("bad_frame", "empty frame body")
			elif _body_bytes > max_frame_bytes:
				_fail("frame_too_large", "frame of %d bytes exceeds the limit of %d" % [_body_bytes, max_frame_bytes])
		elif _pending.size() - pos >= _body_bytes:
			var body := _pending.subarray(pos, pos + _body_bytes - 1)
			pos += _body_bytes
			_body_bytes = -1
			var decoded = _codec.decode(body)
			if _codec.code != "":
				_fail(_codec.code, _codec.message)
				break
			var refused: Dictionary = Messages.check(decoded)
			if refused:
				_fail(refused.code, refused.message)
				break
			out.append(decoded)
		else:
			break
	if pos >= _pending.size():
		_pending = PoolByteArray()
	elif pos > 0:
		_pending = _pending.subarray(pos, _pending.size() - 1)
	return out


func eof() -> bool:
	"""True if the stream may end here; else sets `code` (bad_frame: it ended inside a frame)."""
	if code == "" and (_pending.size() > 0 or _body_bytes >= 0):
		_fail("bad_frame", "the stream ended inside a frame")
	return code == ""


func _fail(error_code: String, text: String) -> void:
	code = error_code
	message = text


static func frame(body: PoolByteArray) -> PoolByteArray:
	"""The frame for a body: its length as 8 digits, then the body."""
	var out := ("%08d" % body.size()).to_ascii()
	out.append_array(body)
	return out
