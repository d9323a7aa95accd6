# msgpack as RLlink uses it (PROTOCOL.md 3 and 4), written for GDScript, which has none.
#
# Values map as: nil <-> null, bool, int (64-bit signed), float (read from
# float32 or float64, written as float64, as Python writes floats), str <->
# String, bin <-> PoolByteArray, array <-> Array, map <-> Dictionary (insertion
# order kept; str keys become String, bin keys PoolByteArray). A map with bin
# keys that has "nd" is msgpack-numpy's array or scalar and becomes an
# NdArray (ndarray.gd), checked as PROTOCOL.md 4 says. Extension types are
# refused. A msgpack uint64 above 2^63 - 1, which no GDScript int holds, is
# read as a UInt64 (below) and written back as it came. GDScript has no exceptions: decode() returns null and sets `code`
# (an error code of PROTOCOL.md 11: bad_body, unsafe_payload) and `message`.
extends Reference

const NdArray = preload("res://addons/rlinks/ndarray.gd")

#: Deepest nesting decode() accepts (RLlib's data is under 10 deep).
const MAX_DEPTH = 64

var code := ""
var message := ""
var _buf: StreamPeerBuffer
var _size := 0


class UInt64:
	extends Reference
	"""A uint64 of 2^63 or more: `bits` is its two's-complement reading as a (negative) int."""
	var bits := 0


func decode(body: PoolByteArray):
	"""The one msgpack value `body` holds, or null with `code` set."""
	code = ""
	message = ""
	_buf = StreamPeerBuffer.new()
	_buf.big_endian = true
	_buf.data_array = body
	_size = body.size()
	var value = _value(0)
	if code == "" and _buf.get_position() != _size:
		_fail("bad_body", "%d bytes after the msgpack value" % (_size - _buf.get_position()))
	return null if code != "" else value


func encode(value) -> PoolByteArray:
	"""msgpack bytes of `value`; an unsupported Variant type is a bug of the caller (push_error, null written)."""
	var buf := StreamPeerBuffer.new()
	buf.big_endian = true
	_put(buf, value)
	return buf.data_array


func nd(dtype: String, shape: Array, values: Array, is_scalar := false):
	"""A new NdArray (e.g. nd("<f4", [2], [0.5, 1.0]))."""
	return NdArray.new().setup(dtype, shape, values, is_scalar)


func _fail(error_code: String, text: String) -> void:
	if code == "":
		code = error_code
		message = text


func _need(n: int) -> bool:
	if _size - _buf.get_position() < n:
		_fail("bad_body", "the msgpack value is truncated")
		return false
	return true


func _length(width: int) -> int:
	if not _need(width):
		return -1
	match width:
		1: return _buf.get_u8()
		2: return _buf.get_u16()
	return _buf.get_u32()


func _value(depth: int):
	if code != "" or not _need(1):
		return null
	var b := _buf.get_u8()
	if b <= 0x7f:
		return b
	if b >= 0xe0:
		return b - 256
	if b <= 0x8f:
		return _map(b & 0x0f, depth)
	if b <= 0x9f:
		return _array(b & 0x0f, depth)
	if b <= 0xbf:
		return _str(b & 0x1f)
	match b:
		0xc0:
			return null
		0xc2:
			return false
		0xc3:
			return true
		0xc4, 0xc5, 0xc6:
			return _bin(_length([1, 2, 4][b - 0xc4]))
		0xca:
			return _buf.get_float() if _need(4) else null
		0xcb:
			return _buf.get_double() if _need(8) else null
		0xcc:
			return _buf.get_u8() if _need(1) else null
		0xcd:
			return _buf.get_u16() if _need(2) else null
		0xce:
			return _buf.get_u32() if _need(4) else null
		0xcf:
			return _uint64() if _need(8) else null
		0xd0:
			return _buf.get_8() if _need(1) else null
		0xd1:
			return _buf.get_16() if _need(2) else null
		0xd2:
			return _buf.get_32() if _need(4) else null
		0xd3:
			return _buf.get_64() if _need(8) else null
		0xd9, 0xda, 0xdb:
			return _str(_length([1, 2, 4][b - 0xd9]))
		0xdc, 0xdd:
			return _array(_length([2, 4][b - 0xdc]), depth)
		0xde, 0xdf:
			return _map(_length([2, 4][b - 0xde]), depth)
		0xc7, 0xc8, 0xc9, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
			_fail("bad_body", "msgpack extension types are not part of RLlink")
			return null
	_fail("bad_body", "0x%02x is not a msgpack type byte" % b)
	return null


func _uint64():
	var bits := _buf.get_u64()
	if bits >= 0:
		return bits
	var big = UInt64.new()
	big.bits = bits
	return big


func _str(n: int):
	if n < 0 or not _need(n):
		return null
	return _buf.get_utf8_string(n) if n > 0 else ""


func _bin(n: int):
	if n < 0 or not _need(n):
		return null
	if n == 0:
		return PoolByteArray()
	return _buf.get_data(n)[1]


func _array(n: int, depth: int):
	if n < 0:
		return null
	if depth >= MAX_DEPTH:
		_fail("bad_body", "nested deeper than %d levels" % MAX_DEPTH)
		return null
	if not _need(n):  # each item takes at least one byte: a bogus count can't make us allocate
		return null
	var out := []
	out.resize(n)
	for i in n:
		out[i] = _value(depth + 1)
		if code != "":
			return null
	return out


func _map(n: int, depth: int):
	if n < 0:
		return null
	if depth >= MAX_DEPTH:
		_fail("bad_body", "nested deeper than %d levels" % MAX_DEPTH)
		return null
	if not _need(2 * n):
		return null
	var out := {}
	var bin_keys := false
	for i in n:
		var key = _value(depth + 1)
		var value = _value(depth + 1)
		if code != "":
			return null
		if typeof(key) == TYPE_RAW_ARRAY:
			bin_keys = true
		out[key] = value
	if bin_keys and out.has("nd".to_utf8()):
		return _numpy(out)
	return out


func _numpy(wire: Dictionary):
	"""msgpack-numpy's map as an NdArray, checked as PROTOCOL.md 4 says (null with `code` set if refused)."""
	var kind = wire.get("kind".to_utf8(), PoolByteArray())
	if typeof(kind) != TYPE_RAW_ARRAY and typeof(kind) != TYPE_STRING:
		_fail("bad_body", "unknown array kind")
		return null
	var text: String = kind.get_string_from_ascii() if typeof(kind) == TYPE_RAW_ARRAY else kind
	if text != "":
		if text == "O" or text == "V":
			_fail("unsafe_payload", "object and structured (kind '%s') arrays are refused" % text)
		else:
			_fail("bad_body", "unknown array kind '%s'" % text)
		return null
	var data = wire.get("data".to_utf8())
	if typeof(data) != TYPE_RAW_ARRAY:
		_fail("bad_body", "array data must be bin")
		return null
	var parsed: Dictionary = NdArray.parse(wire.get("type".to_utf8()))
	if parsed.has("code"):
		_fail(parsed.code, parsed.message)
		return null
	var array = NdArray.new()
	array.dtype = wire["type".to_utf8()]
	var is_nd = wire["nd".to_utf8()]
	if is_nd is bool and not is_nd:
		if wire.size() > 3 + int(wire.has("kind".to_utf8())):
			_fail("bad_body", "unexpected keys in a numpy scalar")
			return null
		array.scalar = true
	elif is_nd is bool:
		var shape = wire.get("shape".to_utf8())
		if typeof(shape) != TYPE_ARRAY:
			_fail("bad_body", "array shape must be a list of ints")
			return null
		for dim in shape:
			if typeof(dim) != TYPE_INT or dim < 0:
				_fail("bad_body", "array shape must be non-negative ints")
				return null
		array.shape = shape
	else:
		_fail("bad_body", "array map's 'nd' must be true or false")
		return null
	if array.count() * array.item_size() != data.size():
		_fail("bad_body", "array of shape %s and dtype %s needs %d bytes, data has %d"
				% [str(array.shape), array.dtype, array.count() * array.item_size(), data.size()])
		return null
	array.decode_data(data)
	return array


func _put(buf: StreamPeerBuffer, value) -> void:
	match typeof(value):
		TYPE_NIL:
			buf.put_u8(0xc0)
		TYPE_BOOL:
			buf.put_u8(0xc3 if value else 0xc2)
		TYPE_INT:
			_put_int(buf, value)
		TYPE_REAL:
			buf.put_u8(0xcb)
			buf.put_double(value)
		TYPE_STRING:
			var utf8: PoolByteArray = value.to_utf8()
			_put_head(buf, utf8.size(), 0xa0, 32, [0xd9, 0xda, 0xdb])
			buf.put_data(utf8)
		TYPE_RAW_ARRAY:
			_put_head(buf, value.size(), -1, 0, [0xc4, 0xc5, 0xc6])
			buf.put_data(value)
		TYPE_ARRAY, TYPE_REAL_ARRAY, TYPE_INT_ARRAY, TYPE_STRING_ARRAY:
			_put_head(buf, value.size(), 0x90, 16, [-1, 0xdc, 0xdd])
			for item in value:
				_put(buf, item)
		TYPE_DICTIONARY:
			_put_head(buf, value.size(), 0x80, 16, [-1, 0xde, 0xdf])
			for key in value:
				_put(buf, key)
				_put(buf, value[key])
		TYPE_OBJECT:
			if value is NdArray:
				_put_numpy(buf, value)
				return
			if value is UInt64:
				buf.put_u8(0xcf)
				buf.put_64(value.bits)
				return
			push_error("rlinks codec: can't encode object %s" % str(value))
			buf.put_u8(0xc0)
		_:
			push_error("rlinks codec: can't encode a value of Variant type %d" % typeof(value))
			buf.put_u8(0xc0)


func _put_head(buf: StreamPeerBuffer, n: int, fix: int, fix_limit: int, wide: Array) -> void:
	"""A str/bin/array/map header: the fix form under fix_limit, else the 8-, 16- or 32-bit length form."""
	if n < fix_limit:
		buf.put_u8(fix | n)
	elif n < 256 and wide[0] >= 0:
		buf.put_u8(wide[0])
		buf.put_u8(n)
	elif n < 65536:
		buf.put_u8(wide[1])
		buf.put_u16(n)
	else:
		buf.put_u8(wide[2])
		buf.put_u32(n)


func _put_int(buf: StreamPeerBuffer, v: int) -> void:
	# The shortest form, as msgpack-python writes it: unsigned forms for v >= 0, signed ones below.
	if v >= 0:
		if v < 128:
			buf.put_u8(v)
		elif v < 256:
			buf.put_u8(0xcc)
			buf.put_u8(v)
		elif v < 65536:
			buf.put_u8(0xcd)
			buf.put_u16(v)
		elif v < 4294967296:
			buf.put_u8(0xce)
			buf.put_u32(v)
		else:
			buf.put_u8(0xcf)
			buf.put_u64(v)
	elif v >= -32:
		buf.put_u8(v + 256)
	elif v >= -128:
		buf.put_u8(0xd0)
		buf.put_8(v)
	elif v >= -32768:
		buf.put_u8(0xd1)
		buf.put_16(v)
	elif v >= -2147483648:
		buf.put_u8(0xd2)
		buf.put_32(v)
	else:
		buf.put_u8(0xd3)
		buf.put_64(v)


func _put_numpy(buf: StreamPeerBuffer, array) -> void:
	# msgpack-numpy's key order: nd, type, kind, shape, data (arrays); nd, type, data (scalars).
	var wire := {"nd".to_utf8(): not array.scalar, "type".to_utf8(): array.dtype}
	if not array.scalar:
		wire["kind".to_utf8()] = PoolByteArray()
		wire["shape".to_utf8()] = array.shape
	wire["data".to_utf8()] = array.encode_data()
	_put(buf, wire)
