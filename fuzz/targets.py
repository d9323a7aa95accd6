"""Fuzz targets for everything a stranger's bytes reach: framing, messages, episodes, the handshake.

Each ``check_*`` function takes fuzzer-chosen input, runs one layer of the
protocol on it and asserts what must hold for *any* input. Only the
documented errors may escape (:class:`ProtocolError` and its subclasses);
anything else, or a broken invariant, is a bug and surfaces as an
``AssertionError`` or the unexpected exception itself.

The same targets serve two drivers:

* ``tests/test_fuzz_targets.py`` drives them with hypothesis, bounded for CI
  and longer with ``RLINKS_FUZZ_EXAMPLES`` (``make fuzz``);
* ``fuzz/run_atheris.py`` drives them with atheris (coverage-guided
  libFuzzer), when atheris is installed.

Seeds are the shared test vectors in ``tests/vectors/``: valid and invalid
streams that a mutator starts from, so mutations begin deep inside the
format instead of at its first byte.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from rlinks_rllib.protocol import FrameDecoder, ProtocolError, encode_message, parse_offer, validate_message
from rlinks_rllib.protocol.auth import ServerAuth, normalize_secret
from rlinks_rllib.protocol.episodes import (
    ACTION_DIST_INPUTS,
    ACTION_LOGP,
    EpisodeError,
    build_episode_state,
    check_episode_state,
)
from rlinks_rllib.protocol.errors import AuthFailed, InvalidMessage
from rlinks_rllib.protocol.messages import MessageType
from rlinks_rllib.protocol.spaces import MAX_SPACE_LEAVES, SpaceMismatch, check_space, check_value, leaves

__all__ = [
    "SEEDS",
    "CARTPOLE_RULES",
    "seed_streams",
    "valid_episode",
    "check_stream",
    "check_message",
    "check_episode",
    "check_handshake",
]

VECTORS = Path(__file__).resolve().parents[1] / "tests" / "vectors"
#: Small frame limit for fuzzing: big enough for every seed, small enough to be hit.
MAX_FRAME_BYTES = 1 << 20

#: What an RLinkEnvRunner on CartPole checks episodes against (see server/ingest/episodes.py).
CARTPOLE_RULES = dict(
    obs_shape=(4,), obs_dtype=np.float32, num_actions=2, action_shape=(), action_dtype=np.int64,
    required_extra=(ACTION_LOGP, ACTION_DIST_INPUTS), allow_empty=True, max_steps=4096,
)

_SECRET = normalize_secret("fuzzing-secret-fuzzing-secret")


def seed_streams() -> list[bytes]:
    """Every test vector's bytes, sorted by name (valid and invalid alike)."""
    return [path.read_bytes() for path in sorted(VECTORS.glob("*.bin"))]


SEEDS: list[bytes] = seed_streams()


def _decode(data: bytes, cuts: Iterable[int]) -> tuple[list[dict], Optional[ProtocolError]]:
    decoder = FrameDecoder(MAX_FRAME_BYTES)
    bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    messages: list[dict] = []
    try:
        for start, end in zip(bounds, bounds[1:]):
            messages += decoder.feed(data[start:end])
    except ProtocolError as exc:
        # A spent decoder repeats its error instead of reading on out of sync.
        try:
            decoder.feed(b"00000001\xc0")
        except ProtocolError as again:
            assert again is exc, (exc, again)
        else:
            raise AssertionError("the decoder read on after an error") from exc
        return messages, exc
    try:
        decoder.eof()
    except ProtocolError as exc:
        return messages, exc
    return messages, None


def check_stream(data: bytes, cuts: Sequence[int] = ()) -> list[dict]:
    """Decode ``data`` whole and split at ``cuts``; both must agree, and each message must survive a round trip.

    Agree means: the same error (class), and the same messages before it,
    except that feeding in smaller pieces may deliver a few more of them.

    Returns the messages decoded before any error.
    """
    whole, whole_error = _decode(data, ())
    split, split_error = _decode(data, cuts)
    assert type(whole_error) is type(split_error), (whole_error, split_error)
    whole_types, split_types = [m["type"] for m in whole], [m["type"] for m in split]
    if whole_error is None:
        assert whole_types == split_types
    else:
        # Messages completed in the chunk that fails are not returned (FrameDecoder.feed
        # raises instead), so smaller chunks may deliver more of them, never others.
        assert split_types[: len(whole_types)] == whole_types
    for message in whole:
        assert isinstance(message, dict) and MessageType(message["type"]) is not None
        validate_message(message)
        again, error = _decode(encode_message(message), ())
        assert error is None and [m["type"] for m in again] == [message["type"]], error
    return whole


def check_message(message: Any) -> None:
    """Validate an arbitrary decoded value as a message: InvalidMessage or a message that round-trips."""
    try:
        validate_message(message)
    except InvalidMessage:
        return
    frame = encode_message(message)
    again, error = _decode(frame, ())
    assert error is None, error
    assert len(again) == 1 and again[0]["type"] == message["type"] and again[0].keys() == message.keys()


def check_space_and_value(desc: Any, value: Any) -> None:
    """A peer's space description and a value for it: refused with ``InvalidMessage`` or accepted whole.

    Whatever :func:`check_space` accepts has a flat leaf view, and a value
    :func:`check_value` accepts has every leaf as an array of the space's dtype.
    """
    try:
        check_space(desc)
    except InvalidMessage:
        return
    flat = list(leaves(desc))
    assert 1 <= len(flat) <= MAX_SPACE_LEAVES
    try:
        checked = check_value(desc, value)
    except SpaceMismatch:
        return
    for path, leaf in flat:
        node = checked
        for part in path:
            node = node[part]
        assert isinstance(node, np.ndarray), (path, type(node))


def valid_episode(steps: int = 5, seed: int = 0) -> dict:
    """A CartPole chunk that passes :data:`CARTPOLE_RULES`, to mutate."""
    rng = np.random.default_rng(seed)
    return build_episode_state(
        f"episode-{seed}",
        rng.normal(size=(steps + 1, 4)).astype(np.float32),
        rng.integers(0, 2, size=steps),
        np.ones(steps, np.float32),
        extra_model_outputs={ACTION_LOGP: np.full(steps, -0.69, np.float32),
                             ACTION_DIST_INPUTS: np.zeros((steps, 2), np.float32)},
    )


def check_episode(state: Any, *, rllib: bool = False) -> Optional[dict]:
    """Run the server's episode check; if it accepts, the result must be self-consistent.

    With ``rllib=True`` an accepted state must also build a valid RLlib
    ``SingleAgentEpisode`` of the same length (the check's promise).
    Returns the normalized state, or ``None`` if refused.
    """
    try:
        clean = check_episode_state(state, **CARTPOLE_RULES)
    except EpisodeError:
        return None
    steps = clean["t"] - clean["t_started"]
    rewards = clean["rewards"]["data"]
    assert len(rewards) - clean["rewards"]["lookback"] == steps
    assert len(clean["infos"]["data"]) - clean["infos"]["lookback"] == steps + 1
    if steps:
        obs = clean["observations"]["data"]
        assert obs.dtype == np.float32 and obs.shape[1:] == (4,)
        assert np.isfinite(rewards).all()
        actions = clean["actions"]["data"]
        assert ((actions >= 0) & (actions < 2)).all()
    if rllib and steps:
        from ray.rllib.env.single_agent_episode import SingleAgentEpisode

        episode = SingleAgentEpisode.from_state(clean)
        episode.validate()
        assert len(episode) == steps
    return clean


def check_handshake(ping: Any, auth_message: Any) -> None:
    """A PING and an AUTH from a stranger: they may be refused, but a made-up proof never passes."""
    try:
        offer = parse_offer(ping) if isinstance(ping, dict) else None
    except InvalidMessage:
        return
    server = ServerAuth(_SECRET)
    try:
        server.challenge(offer)
    except AuthFailed:
        return
    try:
        server.accept(auth_message if isinstance(auth_message, dict) else {"proof": auth_message})
    except AuthFailed:
        return
    raise AssertionError("a proof made without the secret was accepted")
