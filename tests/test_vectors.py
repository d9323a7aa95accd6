"""Replay the shared test vectors in ``tests/vectors/`` (format: ``tests/vectors/README.md``)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from rlinks_rllib import protocol
from rlinks_rllib.protocol import FrameDecoder, ProtocolError, encode_message

VECTORS = Path(__file__).resolve().parent / "vectors"
NAMES = sorted(p.stem for p in VECTORS.glob("*.json"))


def load_generator():
    spec = importlib.util.spec_from_file_location("make_vectors", VECTORS / "make_vectors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def meaning(value):
    """A decoded value in the vectors' JSON form."""
    if isinstance(value, np.ndarray):
        data = [[x.real, x.imag] if np.iscomplexobj(x) else x for x in value.reshape(-1).tolist()]
        return {"$ndarray": {"dtype": value.dtype.str, "shape": list(value.shape), "data": data}}
    if isinstance(value, np.generic):
        item = value.item()
        data = [item.real, item.imag] if isinstance(item, complex) else item
        return {"$scalar": {"dtype": value.dtype.str, "data": data}}
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, dict):
        return {k: meaning(v) for k, v in value.items()}
    if isinstance(value, list):
        return [meaning(v) for v in value]
    return value


def unmeaning(value):
    """The Python value a JSON meaning stands for (to encode it again)."""
    if isinstance(value, dict):
        if "$ndarray" in value:
            spec = value["$ndarray"]
            dtype = np.dtype(spec["dtype"])
            data = [complex(*x) for x in spec["data"]] if dtype.kind == "c" else spec["data"]
            return np.array(data, dtype=dtype).reshape(spec["shape"])
        if "$scalar" in value:
            spec = value["$scalar"]
            data = complex(*spec["data"]) if isinstance(spec["data"], list) else spec["data"]
            return np.array(data, dtype=spec["dtype"])[()]
        if "$bytes" in value:
            return bytes.fromhex(value["$bytes"])
        return {k: unmeaning(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unmeaning(v) for v in value]
    return value


def replay(data: bytes, max_frame_bytes: int, chunk: int) -> tuple[list, ProtocolError | None, str | None]:
    """Feed ``data`` in ``chunk``-byte pieces, then end the stream."""
    decoder = FrameDecoder(max_frame_bytes=max_frame_bytes)
    messages = []
    try:
        for start in range(0, len(data), chunk):
            messages += decoder.feed(data[start : start + chunk])
    except ProtocolError as exc:
        return messages, exc, "feed"
    try:
        decoder.eof()
    except ProtocolError as exc:
        return messages, exc, "eof"
    return messages, None, None


def test_there_are_vectors():
    assert len(NAMES) > 50
    assert {p.stem for p in VECTORS.glob("*.bin")} == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_vector(name):
    spec = json.loads((VECTORS / f"{name}.json").read_text())
    data = (VECTORS / f"{name}.bin").read_bytes()
    error = spec["error"]
    assert name.startswith("valid_") == (error is None)

    # Byte by byte: every message before an error comes out.
    messages, exc, when = replay(data, spec["max_frame_bytes"], 1)
    assert [meaning(m) for m in messages] == spec["messages"]
    if error is None:
        assert exc is None, exc
    else:
        assert exc is not None, "accepted an invalid stream"
        assert type(exc).__name__ == error["class"]
        assert exc.code == error["code"] == getattr(protocol, error["class"]).code
        assert when == error["when"]

    # All at once: the same outcome (messages of the failing chunk are not returned).
    messages, exc, when = replay(data, spec["max_frame_bytes"], len(data) or 1)
    if error is None:
        assert exc is None and [meaning(m) for m in messages] == spec["messages"]
    else:
        assert type(exc).__name__ == error["class"] and when == error["when"]

    if spec["canonical"]:
        assert b"".join(encode_message(unmeaning(m)) for m in spec["messages"]) == data


def test_vectors_are_up_to_date(tmp_path):
    written = load_generator().generate(tmp_path)
    assert sorted(p.name for p in written) == sorted(p.name for p in VECTORS.glob("*") if p.suffix in (".bin", ".json"))
    for path in written:
        assert path.read_bytes() == (VECTORS / path.name).read_bytes(), f"{path.name} is stale: run make_vectors.py"
