# One RLlink connection from a game (PROTOCOL.md 6 and 10): connecting while
# the learner is not up yet, the handshake and its extensions, the directory,
# requests and their replies, and the ACK window over batches of episodes.
#
# Calls block the calling frame until their reply has come, each within a
# bounded time. GDScript has no exceptions: a call that fails returns null or
# false and leaves `code` (an error code of PROTOCOL.md 11, the peer's own
# when it sent ERROR, or "connection_failed", "timeout", "closed") and
# `message` set; the connection is then closed. `code` is "shutting_down"
# when the learner ended the run.
extends Reference

const Codec = preload("res://addons/rlinks/codec.gd")
const Framing = preload("res://addons/rlinks/framing.gd")

#: What this client says it is in its PING.
const AGENT = "rlinks-godot/0.1"
#: How long the first connection keeps trying a learner that is not up yet (the Python client's default) ...
const DEFAULT_CONNECT_WAIT_S = 60.0
#: ... unless this environment variable says otherwise (the same as the Python client's).
const CONNECT_WAIT_ENV = "RLINKS_CONNECT_WAIT_S"
#: The longest wait for one reply: an on-policy SET_STATE comes after a whole training step.
const REPLY_TIMEOUT_S = 600.0
#: Batches sent and not yet confirmed (ACK) before a send waits for a confirmation.
const MAX_UNACKED = 8
#: Replies that may wait unread (one request is out at a time, so one is the most that can).
const MAX_INBOX = 4
#: The largest body a sender may write (PROTOCOL.md 2).
const MAX_BODY_BYTES = 99999999

var code := ""
var message := ""
var agreed := []          # the extensions the server agreed to
var client_id := ""       # stable for this client's life (the ack extension keys resends by it)

var _opened_with := []      # open()'s arguments, for reopen()
var _is_directory := false  # the last PONG came from a learner's directory (PROTOCOL.md 10.4)
var _tcp: StreamPeerTCP
var _framing
var _codec = Codec.new()
var _inbox := []
var _next_seq := 1
var _unacked := {}        # seq -> true, at most MAX_UNACKED


func _init() -> void:
	var rng := RandomNumberGenerator.new()
	rng.randomize()
	for i in 16:
		client_id += "%02x" % rng.randi_range(0, 255)


static func connect_wait_s() -> float:
	"""$RLINKS_CONNECT_WAIT_S if set, else DEFAULT_CONNECT_WAIT_S."""
	var text := OS.get_environment(CONNECT_WAIT_ENV)
	return float(text) if text.is_valid_float() and float(text) >= 0.0 else DEFAULT_CONNECT_WAIT_S


func open(host: String, port: int, extensions: Array, wait_s: float) -> bool:
	"""Connect (trying again for up to `wait_s` while nothing listens) and shake hands.

	A PONG that says it comes from a directory (PROTOCOL.md 10.4) is
	followed by GET_ENDPOINTS and a connection to the first runner that
	answers; a directory that lists none yet is asked again, within the
	same `wait_s`. Offers `extensions` (and "endpoints"); `agreed` holds the
	server's answer.
	"""
	_opened_with = [host, port, extensions, wait_s]
	var deadline := OS.get_ticks_msec() + int(wait_s * 1000.0)
	var pause_ms := 100
	while true:
		code = ""
		if _connect(host, port) and _handshake(extensions + ["endpoints"]) and _to_runner(host, port, extensions):
			return true
		var now := OS.get_ticks_msec()
		if code != "connection_failed" or now >= deadline:
			if code == "connection_failed":
				message += " for %.0f s (connect_wait, $%s)" % [wait_s, CONNECT_WAIT_ENV]
			return false
		OS.delay_msec(min(pause_ms, deadline - now))  # the last try comes at the deadline
		pause_ms = min(pause_ms * 2, 2000)
	return false


func dropped() -> bool:
	"""Whether the last failure was the connection itself (closed, or silent past its deadline): worth a reopen()."""
	return code == "closed" or code == "timeout"


func reopen() -> bool:
	"""Connect again as the same client (its client_id), with open()'s arguments and connect_wait.

	For a served client, which holds no batches: the runner has closed its
	open episodes as truncated at their last complete step (PROTOCOL.md
	10.5), so the caller starts new ones. A client with batches not yet
	confirmed does not reconnect (the addon does not resend them yet).
	"""
	if not _unacked.empty():
		return false
	close()
	return open(_opened_with[0], _opened_with[1], _opened_with[2], _opened_with[3])


func _to_runner(host: String, port: int, extensions: Array) -> bool:
	"""On from a directory to the first runner it lists that answers; true at once when this is a runner."""
	if not "endpoints" in agreed or not _is_directory:
		return true
	var listed = request({"type": "GET_ENDPOINTS"}, "ENDPOINTS")
	if listed == null:
		return false
	close()
	for endpoint in listed.endpoints:
		code = ""
		if typeof(endpoint) == TYPE_DICTIONARY and _connect(str(endpoint.get("host")), int(endpoint.get("port", 0))) \
				and _handshake(extensions):
			return true
	code = ""
	return _fail("connection_failed", "the directory at %s:%d listed no runner that answered" % [host, port])


func _connect(host: String, port: int) -> bool:
	_tcp = StreamPeerTCP.new()
	_framing = Framing.new()
	_inbox.clear()
	if _tcp.connect_to_host(host, port) != OK:
		return _fail("connection_failed", "nothing answered at %s:%d" % [host, port])
	var deadline := OS.get_ticks_msec() + 5000
	while _tcp.get_status() == StreamPeerTCP.STATUS_CONNECTING and OS.get_ticks_msec() < deadline:
		OS.delay_msec(1)
	if _tcp.get_status() != StreamPeerTCP.STATUS_CONNECTED:
		_tcp.disconnect_from_host()
		return _fail("connection_failed", "nothing answered at %s:%d" % [host, port])
	_tcp.set_no_delay(true)
	return true


func _handshake(extensions: Array) -> bool:
	var offer := {"version": 1, "extensions": extensions, "agent": AGENT, "client_id": client_id}
	var pong = request({"type": "PING", "rlinks": offer}, "PONG")
	if pong == null:
		return false
	var answer = pong.get("rlinks", {})
	agreed = answer.get("extensions", []) if typeof(answer) == TYPE_DICTIONARY else []
	_is_directory = typeof(answer) == TYPE_DICTIONARY and answer.get("role") == "directory"
	return true


func request(msg: Dictionary, reply_type: String):
	"""Send `msg` and return the reply of `reply_type` (ACKs that come first are taken in); null if it failed."""
	if not send(msg):
		return null
	var reply = _receive(REPLY_TIMEOUT_S)
	if reply == null:
		return null
	if reply.type != reply_type:
		_fail("unexpected_message", "%s came where %s was expected" % [reply.type, reply_type])
		return null
	return reply


func send_batch(type: String, fields: Dictionary):
	"""EPISODES or EPISODES_AND_GET_STATE (returning its SET_STATE), numbered and held until confirmed with `ack`.

	Waits for confirmations first while MAX_UNACKED batches are out
	(flow control: a game runs no further ahead of its learner).
	"""
	var msg := {"type": type}
	for key in fields:
		msg[key] = fields[key]
	if "ack" in agreed:
		while _unacked.size() >= MAX_UNACKED:
			if not _take_in(_await_bytes(REPLY_TIMEOUT_S)):
				return null
		msg["seq"] = _next_seq
		_unacked[_next_seq] = true
		_next_seq += 1
	if type == "EPISODES_AND_GET_STATE":
		return request(msg, "SET_STATE")
	return send(msg)


func unconfirmed() -> int:
	"""Batches sent and not confirmed yet."""
	return _unacked.size()


func send(msg: Dictionary) -> bool:
	if _tcp == null or _tcp.get_status() != StreamPeerTCP.STATUS_CONNECTED:
		return _fail("closed", "the connection is closed") if code == "" else false
	var body: PoolByteArray = _codec.encode(msg)
	if body.size() > MAX_BODY_BYTES:
		return _fail("frame_too_large", "a %s of %d bytes: split it over several messages" % [msg.type, body.size()])
	return _write(Framing.frame(body), REPLY_TIMEOUT_S)


func _write(data: PoolByteArray, timeout_s: float) -> bool:
	"""Write all of `data`, waiting at most `timeout_s` for a learner that does not read."""
	var deadline := OS.get_ticks_msec() + int(timeout_s * 1000.0)
	var sent := 0
	while sent < data.size():
		var result: Array = _tcp.put_partial_data(data if sent == 0 else data.subarray(sent, data.size() - 1))
		if result[0] != OK:
			return _fail("closed", "the learner closed the connection")
		sent += result[1]
		if result[1] == 0:
			if OS.get_ticks_msec() > deadline:
				return _fail("timeout", "the learner read nothing for %.0f s" % timeout_s)
			OS.delay_usec(200)
	return true


func close() -> void:
	if _tcp != null:
		_tcp.disconnect_from_host()


func _receive(timeout_s: float):
	"""The next message that is not an ACK, or null (code set)."""
	while _inbox.empty():
		if not _take_in(_await_bytes(timeout_s)):
			return null
	return _inbox.pop_front()


func _await_bytes(timeout_s: float):
	"""Bytes from the socket, waiting up to `timeout_s`; null (code set) on timeout or a closed connection."""
	var deadline := OS.get_ticks_msec() + int(timeout_s * 1000.0)
	var polls := 0
	while true:
		var got: Array = _tcp.get_partial_data(65536)
		if got[0] != OK:
			_framing.eof()
			_fail("closed", "the learner closed the connection")
			return null
		if got[1].size() > 0:
			return got[1]
		if OS.get_ticks_msec() > deadline:
			_fail("timeout", "no answer from the learner in %.0f s" % timeout_s)
			return null
		polls += 1
		# Spin briefly (a served action comes back in well under a millisecond), then sleep longer and longer.
		if polls > 50:
			OS.delay_usec(min(1000, 10 * (polls - 50)))
	return null


func _take_in(data) -> bool:
	"""Feed bytes to the framing; ACKs settle batches, ERROR ends the connection, the rest waits in the inbox."""
	if data == null:
		return false
	for msg in _framing.feed(data):
		match msg.type:
			"ACK":
				_unacked.erase(msg.seq)  # one for a seq no longer held (a resend's) is ignored
			"ERROR":
				_fail(msg.code, "the learner: " + msg.message)
				return false
			_:
				if _inbox.size() >= MAX_INBOX:
					_fail("unexpected_message", "%s came while %d replies were unread" % [msg.type, _inbox.size()])
					return false
				_inbox.append(msg)
	if _framing.code != "":
		return _fail(_framing.code, _framing.message)
	return true


func _fail(error_code: String, text: String) -> bool:
	if code == "":
		code = error_code
		message = text
	close()
	return false
