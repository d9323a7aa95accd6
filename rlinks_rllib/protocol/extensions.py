"""Extension negotiation: how a peer asks for anything RLlib's RLlink lacks.

A client announces what it speaks in its first message::

    {"type": "PING", "rlinks": {"version": 1, "extensions": ["want_steps", ...], "agent": "..."}}

Our server answers with the subset it agrees to::

    {"type": "PONG", "rlinks": {"version": 1, "extensions": ["want_steps"], "agent": "..."}}

RLlib's server ignores the extra ``rlinks`` key and answers a bare ``PONG``:
the client then knows it speaks plain RLlink and uses no extension. RLlib's
client sends a bare ``PING`` and our server then uses none either. Each
extension is switched on only when both sides named it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from .errors import InvalidMessage
from .limits import MAX_OFFER_DEPTH

__all__ = ["EXTENSIONS_VERSION", "RLINKS_KEY", "NEEDS", "Extension", "Offer", "make_offer", "parse_offer", "negotiate"]

#: Version of the extension set as a whole; bumped when an extension changes meaning.
EXTENSIONS_VERSION = 1

#: The key under which PING and PONG carry the offer.
RLINKS_KEY = "rlinks"

_MAX_NAMES = 64
_MAX_NAME_LEN = 64
_MAX_EXTRA_KEYS = 64


class Extension(str, enum.Enum):
    """Names of the extensions of version 1."""

    #: SET_STATE carries ``want_steps``: how many env steps the server wants
    #: from this client before its next EPISODES_AND_GET_STATE.
    WANT_STEPS = "want_steps"
    #: EPISODES carries ``seq``; the server answers ``ACK`` once RLlib has taken the batch.
    ACK = "ack"
    #: Challenge and response over a shared secret before anything else (see :mod:`.auth`).
    AUTH = "auth"
    #: The peer is a directory (PONG offer ``"role": "directory"``) that answers
    #: GET_ENDPOINTS with the runners to connect to, least-loaded first.
    ENDPOINTS = "endpoints"
    #: The client sends observations (``ACT``) and the server answers with
    #: actions (``ACTIONS``): for a simulator that can't run the policy.
    SERVED_ACTIONS = "served_actions"
    #: ``ACT`` rows may carry an action the simulator took itself (``taken``),
    #: recorded with the policy's log-probability of it, and start episodes
    #: that are never trained on (``train``): RLlib's old ``log_action`` and
    #: ``training_enabled=False`` with served actions.
    SERVED_TAKEN = "served_taken"
    #: ``SET_CONFIG``'s description carries ``policy_graph``: the runner's
    #: module as ONNX with its weights as inputs (PROTOCOL.md 8.1, 10.7).
    POLICY_GRAPH = "policy_graph"
    #: Multi-agent episode chunks, config and weight sets (``protocol.multi_agent``).
    MULTI_AGENT = "multi_agent"
    #: Steps where a person or a scripted controller acted instead of the policy
    #: are marked (the chunk's ``rlinks_takeover`` output, the ``ACT`` column
    #: ``takeover``): trained on off-policy, kept out of on-policy updates, counted.
    TAKEOVER = "takeover"
    #: SET_STATE carries ``timestep``: RLlib's count of env steps sampled
    #: when those weights came, which exploration schedules follow (DQN's
    #: epsilon) in a client that runs the policy itself.
    TIMESTEP = "timestep"
    #: The client sends plain samples (``SAMPLES``: dicts of arrays, not
    #: episodes) to a consumer such as a training loop's dataset (``protocol.samples``).
    SAMPLES = "samples"
    #: Every ``ACK`` carries ``weights_seq_no``: the runner's weights version
    #: now, so a client that runs the policy itself asks for weights
    #: (``GET_STATE``) as soon as they change instead of polling. Needs ``ack``.
    WEIGHTS_NOTICE = "weights_notice"


@dataclass(frozen=True)
class Offer:
    """What one peer said it speaks."""

    version: int
    extensions: frozenset[str] = field(default_factory=frozenset)
    agent: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)


def make_offer(extensions: Iterable[str | Extension], agent: str = "", **extra: Any) -> dict:
    """The ``rlinks`` map to put in a PING or PONG."""
    names = sorted({e.value if isinstance(e, Extension) else str(e) for e in extensions})
    offer: dict[str, Any] = {"version": EXTENSIONS_VERSION, "extensions": names}
    if agent:
        offer["agent"] = agent
    offer.update(extra)
    return offer


def parse_offer(message: Mapping[str, Any]) -> Offer | None:
    """Read the ``rlinks`` offer of a PING or PONG; ``None`` for a plain RLlink peer.

    Unknown extension names are kept (the caller negotiates them away), and
    so are unknown keys, in :attr:`Offer.extra`: at most 64 of them, nested
    at most ``MAX_OFFER_DEPTH`` levels, since a peer that has not
    authenticated yet chooses them.

    Raises:
        InvalidMessage: the offer is present but malformed.
    """
    raw = message.get(RLINKS_KEY)
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidMessage("'rlinks' must be a map")
    version = raw.get("version")
    if type(version) is not int or version < 1:
        raise InvalidMessage("'rlinks.version' must be a positive int")
    names = raw.get("extensions", [])
    if not isinstance(names, list) or len(names) > _MAX_NAMES:
        raise InvalidMessage(f"'rlinks.extensions' must be a list of at most {_MAX_NAMES} names")
    for name in names:
        if type(name) is not str or not 0 < len(name) <= _MAX_NAME_LEN:
            raise InvalidMessage("'rlinks.extensions' must hold non-empty short strings")
    agent = raw.get("agent", "")
    if type(agent) is not str:
        raise InvalidMessage("'rlinks.agent' must be a string")
    extra = {k: v for k, v in raw.items() if k not in ("version", "extensions", "agent")}
    if len(extra) > _MAX_EXTRA_KEYS:
        raise InvalidMessage(f"'rlinks' may carry at most {_MAX_EXTRA_KEYS} other keys")
    _check_depth(extra)
    return Offer(version=version, extensions=frozenset(names), agent=agent[:128], extra=extra)


#: Extensions that mean nothing without another: agreed only together with it.
NEEDS = {Extension.WEIGHTS_NOTICE.value: Extension.ACK.value}


def negotiate(offer: Offer | None, supported: Iterable[str | Extension]) -> frozenset[str]:
    """The extensions both sides speak: the peer's offer cut down to ``supported``,
    less any whose prerequisite (:data:`NEEDS`) is not among them."""
    if offer is None:
        return frozenset()
    ours = {e.value if isinstance(e, Extension) else e for e in supported}
    agreed = offer.extensions & ours
    return frozenset(name for name in agreed if NEEDS.get(name, name) in agreed)


def _check_depth(value: Any) -> None:
    """Refuse maps and lists nested deeper than ``MAX_OFFER_DEPTH``, without recursing."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth >= MAX_OFFER_DEPTH:
            raise InvalidMessage(f"'rlinks' offer nested deeper than {MAX_OFFER_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children)
