"""examples/robot_bc.py end to end on CPU (issue #22): four actors, Ray Train with two workers, model synced back.

Runs the example as a user would, in its own process group (its own local
Ray), bounded in time; checks each worker got a disjoint share covering
every actor and every actor saw a synced model version.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("ray.train")

REPO = Path(__file__).resolve().parent.parent
TIMEOUT_S = 300


@pytest.mark.timeout(TIMEOUT_S + 30)
def test_robot_bc_two_workers_disjoint_shares_and_synced_model():
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "examples" / "robot_bc.py"), "--samples-per-actor", "16"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"robot_bc.py ran longer than {TIMEOUT_S} s\n{out[-3000:]}\n{err[-3000:]}")
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out[-3000:]}\n{err[-3000:]}"
    summary = json.loads(out.strip().splitlines()[-1])
    shares = [set(worker["actors"]) for worker in summary["workers"]]
    assert len(shares) == 2 and not shares[0] & shares[1] and shares[0] | shares[1] == {0, 1, 2, 3}
    assert all(worker["steps"] == 4 for worker in summary["workers"])  # 2 actors x 16 samples / batch 8
    assert all(seen and seen[-1] >= 1 for seen in summary["versions_seen"])
