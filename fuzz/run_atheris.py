"""Coverage-guided fuzzing of the protocol targets with atheris (libFuzzer), when it is installed.

Usage (from the repository root)::

    .venv/bin/pip install atheris          # not a project dependency
    .venv/bin/python fuzz/run_atheris.py stream  -max_total_time=600
    .venv/bin/python fuzz/run_atheris.py episode -max_total_time=600

Targets: ``stream`` (framing and decoding, split or whole), ``message``
(validation of decoded values) and ``episode`` (the server's episode check
on decoded episode states). Arguments after the target go to libFuzzer;
the seed vectors in ``tests/vectors/`` are added to the corpus. Without
atheris, ``RLINKS_FUZZ_EXAMPLES=100000 pytest tests/test_fuzz_targets.py``
runs the same targets under hypothesis.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

try:
    import atheris
except ImportError:
    sys.exit("atheris is not installed: .venv/bin/pip install atheris (or use RLINKS_FUZZ_EXAMPLES with pytest)")

with atheris.instrument_imports():
    from fuzz import targets
    from rlinks_rllib.protocol import ProtocolError
    from rlinks_rllib.protocol.codec import decode_body


def stream(data: bytes) -> None:
    if len(data) < 2:
        return
    cuts = [data[0] * 7, data[1] * 13]
    targets.check_stream(data[2:], cuts)


def message(data: bytes) -> None:
    try:
        value = decode_body(data)
    except ProtocolError:
        return
    targets.check_message(value)


def episode(data: bytes) -> None:
    try:
        value = decode_body(data)
    except ProtocolError:
        return
    targets.check_episode(value)


TARGETS = {"stream": stream, "message": message, "episode": episode}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: {sys.argv[0]} {{{'|'.join(TARGETS)}}} [libFuzzer options]")
    target = TARGETS[sys.argv[1]]
    corpus = ROOT / ".fuzz-corpus" / sys.argv[1]
    corpus.mkdir(parents=True, exist_ok=True)
    for i, seed in enumerate(targets.SEEDS):
        (corpus / f"seed-{i:03d}").write_bytes(seed if target is stream else seed[8:])
    atheris.Setup([sys.argv[0], *sys.argv[2:], str(corpus)], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
