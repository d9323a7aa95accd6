"""The benchmarks still run: each with ``--quick`` in a subprocess, bounded in time.

Only that a benchmark finishes cleanly and prints its ratio lines is checked;
the numbers themselves depend on the machine and are never asserted.
Two are left out to keep the suite in its 25 minutes: ``bench_demo.py``
(its path, ``rlinks demo`` end to end, is run by test_packaging) and
``bench_sac.py`` (five learners even with ``--quick``: 70 to 180 s).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

#: Generous next to the ~30 s (ingest) and ~10 s (client) of a quick run on 2 cores.
TIMEOUT_S = 180


def run_quick(script: str, *args: str) -> str:
    """Run ``benchmarks/<script> --quick *args``; return its stdout, or fail with its output."""
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "benchmarks" / script), "--quick", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, so a timeout ends all it started
    )
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{script} --quick ran longer than {TIMEOUT_S} s\n{out[-3000:]}\n{err[-3000:]}")
    assert proc.returncode == 0, f"{script} --quick exited {proc.returncode}\n{out[-3000:]}\n{err[-3000:]}"
    return out


#: One case of each kind (RLlib's server, our runner with each format, TLS, ACK, images, the raw socket):
#: the larger client counts and the long episodes run the same code.
INGEST_SMOKE_CASES = ("rllib,ours-same-1,ours-stacked-1,ours-stacked-4,ours-stacked-4-tls,ours-stacked-4-ack,"
                      "ours-images,ours-dict-images,raw-images,raw-images-4")


def test_bench_ingest_quick():
    out = run_quick("bench_ingest.py", "--only", INGEST_SMOKE_CASES)
    for ratio in (
        "ratio ours/rllib, same bytes, 1 client(s)",
        "ratio ours-stacked/rllib, 1 client(s)",
        "ratio images ours/raw socket (MB/s)",
        "ratio Dict images ours/raw socket (MB/s)",
        "ratio TLS/plain",
        "ratio ACK/plain",
    ):
        assert ratio in out, out


def test_bench_client_quick():
    out = run_quick("bench_client.py")
    assert "ratio ours/rllib client steps/s" in out, out


def test_bench_served_quick():
    # Two in-process runners (Ray's RLModule each) and up to 64 client threads: about 60 s on 2 cores; with
    # Godot RL's venv already made (benchmarks/out/godot-venv), its game rounds too: about 30 s more.
    out = run_quick("bench_served.py", "--window", "0.5", "--acts", "300")
    for ratio in ("ratio served/local p50", "ratio batched/unbatched, 64 client(s)"):
        assert ratio in out, out
    assert "Godot RL Agents: skipped" in out or all(
        f"ratio ours/Godot RL ({peer}) actions/s, learning paused, 64 agent(s)" in out for peer in ("SB3", "numpy")), out


def test_bench_fleet_quick():
    # 200 connections for 3 s beside one in-process runner: about 15 s on 2 cores.
    out = run_quick("bench_fleet.py")
    for line in ("steps handed over:", "runner memory per connection:", "sample() p99:", "while connected and silent"):
        assert line in out, out


def test_bench_weights_quick():
    # 1 and 8 clients, the default set and a 5 MB one, beside a raw loopback socket: about 10 s.
    out = run_quick("bench_weights.py")
    for line in ("default set, time 8 clients / 1 client", "clients' MB/s / raw loopback MB/s"):
        assert line in out, out


def test_gpu_check_says_so_without_a_gpu():
    """benchmarks/gpu_check.py on a machine without CUDA: a clear message and exit 2, nothing started."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("there is a CUDA device here: run benchmarks/gpu_check.py itself")
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py")], cwd=REPO,
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no CUDA device" in done.stderr and "Traceback" not in done.stderr


def test_bench_multi_agent_quick():
    out = run_quick("bench_multi_agent.py")
    assert "ratio multi-agent/single-agent agent steps/s, 1 client(s)" in out, out
    assert "ERROR" not in out, out
