# A numpy array or scalar as RLlink carries it (PROTOCOL.md 4): msgpack-numpy's
# map {nd, type, kind, shape, data}, here with its elements decoded.
#
# The codec (codec.gd) builds these from the wire and writes them back.
# Elements of the numeric kinds are held as GDScript values, in C order:
# bools, ints (64-bit signed: a u8 element above 2^63 - 1 wraps, as
# GDScript has no larger int) and floats (doubles); a complex element is
# [real, imag]. The bytes (S) and text (U) kinds keep their data as bytes.
extends Reference

#: Item sizes each kind may have (numpy's dtype.str: byte order, kind, size).
const ITEM_SIZES = {
	"b": [1], "i": [1, 2, 4, 8], "u": [1, 2, 4, 8], "f": [2, 4, 8], "c": [8, 16],
}
#: Kinds that are refused as unsafe rather than as malformed (PROTOCOL.md 4).
const UNSAFE_KINDS = "OVMm"

var dtype := ""          # numpy's dtype.str, e.g. "<f4"
var shape := []          # dimensions; [] for a 0-d array or a scalar
var scalar := false      # true: a numpy scalar (nd false), no kind or shape on the wire
var values := []         # the elements in C order (numeric kinds)
var raw := PoolByteArray()  # the data bytes, for kinds S and U only


func setup(dtype_str: String, dims: Array, elements: Array, is_scalar := false):
	dtype = dtype_str
	shape = dims
	values = elements
	scalar = is_scalar
	return self


func count() -> int:
	var n := 1
	for d in shape:
		n *= d
	return n


func kind() -> String:
	return dtype.substr(1, 1)


func item_size() -> int:
	"""Bytes per element (parse() has accepted the dtype)."""
	var size := int(dtype.substr(2))
	return size * 4 if kind() == "U" else size


static func parse(dtype_str) -> Dictionary:
	"""The byte order, kind and size a dtype string names.

	Returns {"order", "kind", "size"} or {"code", "message"}: unsafe_payload
	for object, structured, datetime and timedelta kinds (and a dtype that
	is not a string: msgpack-numpy writes a list for structured ones),
	bad_body for anything else that is not one of PROTOCOL.md 4's types.
	"""
	if typeof(dtype_str) != TYPE_STRING:
		return {"code": "unsafe_payload", "message": "array dtype must be a dtype string"}
	if dtype_str.length() > 16:
		return {"code": "bad_body", "message": "array dtype string too long"}
	if dtype_str.length() >= 2 and "<>|=".find(dtype_str[0]) >= 0 and UNSAFE_KINDS.find(dtype_str[1]) >= 0:
		return {"code": "unsafe_payload", "message": "array dtype '%s' is not allowed" % dtype_str}
	if dtype_str.length() < 3 or "<>|=".find(dtype_str[0]) < 0 or not dtype_str.substr(2).is_valid_integer():
		return {"code": "bad_body", "message": "not a numpy dtype: '%s'" % dtype_str}
	var k: String = dtype_str[1]
	var size := int(dtype_str.substr(2))
	if k == "S" or k == "U":
		if size < 1:
			return {"code": "bad_body", "message": "not a numpy dtype: '%s'" % dtype_str}
	elif not ITEM_SIZES.has(k) or not size in ITEM_SIZES[k]:
		return {"code": "bad_body", "message": "not a numpy dtype: '%s'" % dtype_str}
	return {"order": dtype_str[0], "kind": k, "size": size}


func decode_data(data: PoolByteArray) -> void:
	"""Fill `values` (or `raw`) from the wire bytes; the caller checked the length."""
	var k := kind()
	if k == "S" or k == "U":
		raw = data
		return
	var size := int(dtype.substr(2))
	var buf := StreamPeerBuffer.new()
	buf.big_endian = dtype[0] == ">"
	buf.data_array = data
	var n := data.size() / size if size > 0 else 0
	var out := []
	out.resize(n)
	for i in n:
		match k:
			"b":
				out[i] = buf.get_u8() != 0
			"i", "u":
				out[i] = _get_int(buf, size, k == "u")
			"f":
				if size == 4:
					out[i] = buf.get_float()
				elif size == 8:
					out[i] = buf.get_double()
				else:
					out[i] = half_to_float(buf.get_u16())
			"c":
				out[i] = [buf.get_float(), buf.get_float()] if size == 8 else [buf.get_double(), buf.get_double()]
	values = out


static func _get_int(buf: StreamPeerBuffer, size: int, unsigned: bool) -> int:
	match size:
		1: return buf.get_u8() if unsigned else buf.get_8()
		2: return buf.get_u16() if unsigned else buf.get_16()
		4: return buf.get_u32() if unsigned else buf.get_32()
	return buf.get_u64() if unsigned else buf.get_64()


func encode_data() -> PoolByteArray:
	"""The elements as the wire's data bytes, in the dtype's byte order."""
	var k := kind()
	if k == "S" or k == "U":
		return raw
	var size := int(dtype.substr(2))
	var buf := StreamPeerBuffer.new()
	buf.big_endian = dtype[0] == ">"
	for v in values:
		match k:
			"b":
				buf.put_u8(1 if v else 0)
			"i", "u":
				match size:
					1: buf.put_8(int(v))
					2: buf.put_16(int(v))
					4: buf.put_32(int(v))
					8: buf.put_64(int(v))
			"f":
				if size == 4:
					buf.put_float(float(v))
				elif size == 8:
					buf.put_double(float(v))
				else:
					buf.put_u16(float_to_half(float(v)))
			"c":
				if size == 8:
					buf.put_float(v[0])
					buf.put_float(v[1])
				else:
					buf.put_double(v[0])
					buf.put_double(v[1])
	return buf.data_array


static func half_to_float(bits: int) -> float:
	var sign_of := -1.0 if bits & 0x8000 else 1.0
	var exponent := (bits >> 10) & 0x1f
	var mantissa := bits & 0x3ff
	if exponent == 0:
		return sign_of * mantissa * pow(2.0, -24)
	if exponent == 31:
		return NAN if mantissa else sign_of * INF
	return sign_of * (1.0 + mantissa / 1024.0) * pow(2.0, exponent - 15)


static func float_to_half(x: float) -> int:
	"""IEEE half bits of x (rounded half away from zero; RLlink rarely carries f2)."""
	if is_nan(x):
		return 0x7e00
	var sign_bit := 0x8000 if x < 0.0 else 0
	x = abs(x)
	if x >= 65520.0:
		return sign_bit | 0x7c00
	if x < pow(2.0, -14):
		return sign_bit | int(round(x * pow(2.0, 24)))
	var exponent := int(floor(log(x) / log(2.0)))
	var m := x / pow(2.0, exponent)
	if m >= 2.0:
		m /= 2.0
		exponent += 1
	elif m < 1.0:
		m *= 2.0
		exponent -= 1
	var mantissa := int(round((m - 1.0) * 1024.0))
	if mantissa == 1024:
		mantissa = 0
		exponent += 1
	return sign_bit | ((exponent + 15) << 10) | mantissa
