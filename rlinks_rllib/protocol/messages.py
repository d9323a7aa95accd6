"""RLlink message types, the fields each must carry, and constructors for them.

A message is a ``dict`` with a str ``type`` naming one of :class:`MessageType`.
:func:`validate_message` checks the fields a type requires and leaves every
other key alone, so a peer can extend a message and older peers ignore it.

RLlib's enum also lists message types of its old API stack (``GET_ACTION``,
``LOG_RETURNS``, ...). RLlib's server silently ignores those and its client
then waits forever; we recognise them and refuse them with a clear message.
"""

from __future__ import annotations

import enum
from typing import Any, Mapping

import numpy as np

from .errors import InvalidMessage, UnsupportedMessage

__all__ = [
    "MessageType",
    "OLD_API_TYPES",
    "validate_message",
    "message_type",
    "ping",
    "pong",
    "error",
    "ack",
    "auth",
    "auth_ok",
]


class MessageType(str, enum.Enum):
    """Every message type name, spelled as on the wire."""

    # Client -> server (RLlib's names).
    PING = "PING"
    EPISODES = "EPISODES"
    GET_STATE = "GET_STATE"
    GET_CONFIG = "GET_CONFIG"
    EPISODES_AND_GET_STATE = "EPISODES_AND_GET_STATE"
    # Server -> client (RLlib's names).
    PONG = "PONG"
    SET_STATE = "SET_STATE"
    SET_CONFIG = "SET_CONFIG"
    # RLlib's old API stack: recognised, always refused.
    ACTION_SPACE = "ACTION_SPACE"
    OBSERVATION_SPACE = "OBSERVATION_SPACE"
    GET_WORKER_ARGS = "GET_WORKER_ARGS"
    GET_WEIGHTS = "GET_WEIGHTS"
    REPORT_SAMPLES = "REPORT_SAMPLES"
    START_EPISODE = "START_EPISODE"
    GET_ACTION = "GET_ACTION"
    LOG_ACTION = "LOG_ACTION"
    LOG_RETURNS = "LOG_RETURNS"
    END_EPISODE = "END_EPISODE"
    # Ours. ERROR may go to any peer just before we close the connection;
    # the others only to a peer that negotiated the extension that uses them.
    ERROR = "ERROR"
    ACK = "ACK"
    #: Client -> server: the proof of the ``auth`` extension (see :mod:`.auth`).
    AUTH = "AUTH"
    #: Server -> client: the proof accepted, and the server's own proof.
    AUTH_OK = "AUTH_OK"
    #: Client -> directory: which runners are there? (``endpoints`` extension)
    GET_ENDPOINTS = "GET_ENDPOINTS"
    #: Directory -> client: every runner, least-loaded first.
    ENDPOINTS = "ENDPOINTS"
    #: Client -> server: observations, and what the last actions led to (``served_actions``).
    ACT = "ACT"
    #: Server -> client: the actions for an ``ACT`` (``served_actions``).
    ACTIONS = "ACTIONS"
    #: Client -> server: which modules act for these agents? (``multi_agent``, no mapping table)
    GET_MODULES = "GET_MODULES"
    #: Server -> client: agent id -> module id for a ``GET_MODULES`` (``multi_agent``).
    MODULES = "MODULES"
    #: Client -> server: plain samples, dicts of arrays (``samples``).
    SAMPLES = "SAMPLES"

    def __str__(self) -> str:
        return self.value


OLD_API_TYPES = frozenset(
    {
        MessageType.ACTION_SPACE,
        MessageType.OBSERVATION_SPACE,
        MessageType.GET_WORKER_ARGS,
        MessageType.GET_WEIGHTS,
        MessageType.REPORT_SAMPLES,
        MessageType.START_EPISODE,
        MessageType.GET_ACTION,
        MessageType.LOG_ACTION,
        MessageType.LOG_RETURNS,
        MessageType.END_EPISODE,
    }
)

_BY_NAME = {t.value: t for t in MessageType}

# Field name -> accepted Python types, per message type. ``int`` never
# accepts ``bool`` (msgpack keeps them apart; Python does not).
_REQUIRED: dict[MessageType, dict[str, tuple[type, ...]]] = {
    MessageType.PING: {},
    MessageType.PONG: {},
    MessageType.GET_CONFIG: {},
    MessageType.GET_STATE: {},
    MessageType.SET_CONFIG: {"config": (bytes, dict)},
    MessageType.SET_STATE: {"state": (dict,)},
    MessageType.EPISODES: {"episodes": (list,)},
    MessageType.EPISODES_AND_GET_STATE: {"episodes": (list,)},
    MessageType.ERROR: {"code": (str,), "message": (str,)},
    MessageType.ACK: {"seq": (int,)},
    MessageType.AUTH: {"proof": (bytes,)},
    MessageType.AUTH_OK: {"proof": (bytes,)},
    MessageType.GET_ENDPOINTS: {},
    MessageType.ENDPOINTS: {"endpoints": (list,)},
    MessageType.ACT: {
        "env": (list,),
        "obs": (np.ndarray, list),
        "reward": (np.ndarray, list),
        "start": (np.ndarray, list),
        "terminated": (np.ndarray, list),
        "truncated": (np.ndarray, list),
    },
    MessageType.ACTIONS: {"env": (list,), "actions": (np.ndarray, list), "weights_seq_no": (int,)},
    MessageType.GET_MODULES: {"agents": (list,)},
    MessageType.MODULES: {"modules": (dict,)},
    MessageType.SAMPLES: {"samples": (list,)},
}
_OPTIONAL: dict[MessageType, dict[str, tuple[type, ...]]] = {
    MessageType.PING: {"rlinks": (dict,)},
    MessageType.PONG: {"rlinks": (dict,)},
    MessageType.SET_CONFIG: {"rlinks_config": (dict,)},
    MessageType.SET_STATE: {"want_steps": (int,), "timestep": (int,)},
    MessageType.EPISODES: {"timesteps": (int,), "seq": (int,)},
    MessageType.EPISODES_AND_GET_STATE: {"timesteps": (int,), "seq": (int,)},
    MessageType.SAMPLES: {"seq": (int,), "flush": (bool,)},
    MessageType.ACK: {"weights_seq_no": (int,)},
    MessageType.ACT: {"taken_mask": (np.ndarray, list), "taken": (np.ndarray, list), "train": (np.ndarray, list)},
}


def _check_field(kind: MessageType, message: Mapping[str, Any], name: str, types: tuple[type, ...]) -> None:
    value = message[name]
    if type(value) is bool and bool not in types:
        ok = False
    else:
        ok = isinstance(value, types)
    if not ok:
        expected = " or ".join(t.__name__ for t in types)
        raise InvalidMessage(f"{kind.value}: field {name!r} must be {expected}, got {type(value).__name__}")
    if int in types and type(value) is int and value < 0:
        raise InvalidMessage(f"{kind.value}: field {name!r} must not be negative, got {value}")


def message_type(message: Mapping[str, Any]) -> MessageType:
    """The :class:`MessageType` of a decoded message.

    Raises:
        InvalidMessage: ``message`` is not a map or has no str ``type``.
        UnsupportedMessage: the type is unknown or from RLlib's old API stack.
    """
    if not isinstance(message, dict):
        raise InvalidMessage(f"a message must be a msgpack map, got {type(message).__name__}")
    name = message.get("type")
    if type(name) is not str:
        raise InvalidMessage("a message must have a str field 'type'")
    kind = _BY_NAME.get(name)
    if kind is None:
        raise UnsupportedMessage(f"unknown message type {name[:64]!r}")
    if kind in OLD_API_TYPES:
        raise UnsupportedMessage(
            f"{name} belongs to RLlib's old API stack and is not supported; "
            "send EPISODES / EPISODES_AND_GET_STATE and compute actions on the client"
        )
    return kind


def validate_message(message: Any) -> dict:
    """Check that ``message`` is a known, current message with the fields its type needs.

    Returns ``message`` itself (unknown extra keys kept).

    Raises:
        InvalidMessage: a required field is missing or a field has the wrong type.
        UnsupportedMessage: the type is unknown or from RLlib's old API stack.
    """
    kind = message_type(message)
    for name, types in _REQUIRED[kind].items():
        if name not in message:
            raise InvalidMessage(f"{kind.value}: missing required field {name!r}")
        _check_field(kind, message, name, types)
    for name, types in _OPTIONAL.get(kind, {}).items():
        if name in message:
            _check_field(kind, message, name, types)
    if kind in (MessageType.EPISODES, MessageType.EPISODES_AND_GET_STATE):
        for i, episode in enumerate(message["episodes"]):
            if not isinstance(episode, dict):
                raise InvalidMessage(f"{kind.value}: episodes[{i}] must be a map, got {type(episode).__name__}")
    return message


def ping(rlinks: dict | None = None) -> dict:
    """A ``PING``, optionally announcing our extensions (see :mod:`.extensions`)."""
    return {"type": MessageType.PING.value} if rlinks is None else {"type": MessageType.PING.value, "rlinks": rlinks}


def pong(rlinks: dict | None = None) -> dict:
    """A ``PONG``; ``rlinks`` answers a peer that announced extensions."""
    return {"type": MessageType.PONG.value} if rlinks is None else {"type": MessageType.PONG.value, "rlinks": rlinks}


def error(code: str, message: str) -> dict:
    """An ``ERROR``: sent just before closing a connection for cause."""
    return {"type": MessageType.ERROR.value, "code": code, "message": message}


def ack(seq: int, weights_seq_no: int | None = None) -> dict:
    """An ``ACK``: RLlib has taken batch ``seq``; ``weights_seq_no``: the runner's weights now (``weights_notice``)."""
    if weights_seq_no is None:
        return {"type": MessageType.ACK.value, "seq": seq}
    return {"type": MessageType.ACK.value, "seq": seq, "weights_seq_no": weights_seq_no}


def auth(proof: bytes) -> dict:
    """An ``AUTH``: the client's answer to the server's challenge."""
    return {"type": MessageType.AUTH.value, "proof": proof}


def auth_ok(proof: bytes) -> dict:
    """An ``AUTH_OK``: the client is accepted; ``proof`` shows the server knows the secret too."""
    return {"type": MessageType.AUTH_OK.value, "proof": proof}
