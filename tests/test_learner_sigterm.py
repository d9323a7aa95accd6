"""A learner with no simulator stops on SIGTERM (``ray job stop``), checkpoints, and the checkpoint resumes.

SAC's and DQN's iterations wait for 100 and 1,000 env steps, PPO's for its
train batch; a learner no simulator reached used to sit in its first
iteration past SIGTERM until it was killed. SAC and DQN serve from the
driver's own runner (``num_env_runners: 0``), whose wait the learner may cut
short; PPO's config has two remote runners, which the learner first asks to
stop handing steps over while idle (see learner.py's
``_waiting_for_first_steps``). Each learner here runs in a session of its
own, so the test can see that nothing it started outlives it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from harness import RLINKS, ROOT
from rlinks_rllib.training.learner import EXIT_TERMINATED

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

#: Bounds of the waits (generous for a loaded 2-core machine; what it took is printed).
READY_S = 180
STOP_S = 60


def _session(pid: int) -> list[int]:
    """The processes still in session ``pid`` (those the learner started and left behind)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == pid:
                    found.append(int(entry.name))
            except ProcessLookupError:
                continue
    return found


def _learner_until_sigterm(tmp_path: Path, config: str, *extra: str) -> tuple[int, float, str]:
    """Start ``rlinks learner``, SIGTERM it once it trains; ``(exit code, seconds to exit, output)``."""
    log_path = tmp_path / f"{config}-{len(list(tmp_path.glob('*.log')))}.log"
    with open(log_path, "w+") as log:
        learner = subprocess.Popen([*RLINKS, "learner", "--config", config, "--port", "0", "--stop-iters", "1000",
                                    "--output", str(tmp_path / "run"), *extra],
                                   cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + READY_S
            while "simulators connect to" not in log_path.read_text():
                assert learner.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, "the learner never listened"
                time.sleep(0.2)
            time.sleep(2.0)  # inside its first iteration, which no simulator will fill
            sent = time.monotonic()
            learner.send_signal(signal.SIGTERM)
            code = learner.wait(STOP_S)
            took = time.monotonic() - sent
        finally:
            if learner.poll() is None:
                os.killpg(learner.pid, signal.SIGKILL)
                learner.wait(10)
        deadline = time.monotonic() + 30
        while _session(learner.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = _session(learner.pid)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert not left, f"the learner left {len(left)} process(es) behind"
        return code, took, log_path.read_text()


#: One learner of each kind: SAC and DQN serve from the driver's own runner, PPO has two remote runners.
CONFIGS = ("sac_pendulum", "dqn_cartpole", "ppo_cartpole")


def test_sac_dqn_and_ppo_learners_no_simulator_reached_stop_on_sigterm_with_a_checkpoint_that_resumes(tmp_path):
    """The three learners run side by side (each its own Ray, in its own session), each stopped once it listens.

    Side by side they take about as long as one does alone; the bound is
    ``STOP_S`` for each all the same. SAC's checkpoint is then resumed and
    stopped again.
    """
    outcomes: dict[str, object] = {}

    def stop(config: str) -> None:
        try:
            (tmp_path / config).mkdir()
            outcomes[config] = _learner_until_sigterm(tmp_path / config, config)
        except BaseException as exc:  # handed to the test's thread, which raises it
            outcomes[config] = exc

    threads = [threading.Thread(target=stop, args=(config,), name=f"sigterm-{config}") for config in CONFIGS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(READY_S + STOP_S + 60)
    assert not any(thread.is_alive() for thread in threads), "a learner outlived its bounds"
    for config in CONFIGS:
        outcome = outcomes[config]
        if isinstance(outcome, BaseException):
            raise outcome
        code, took, out = outcome
        assert code == EXIT_TERMINATED, out[-3000:]
        assert "terminated (SIGTERM) after" in out and (tmp_path / config / "run" / "checkpoint").is_dir(), out[-3000:]
        print(f"\n{config}: stopped {took:.1f} s after SIGTERM with no simulator connected (three side by side)")
    checkpoint = tmp_path / "sac_pendulum" / "run" / "checkpoint"
    code, took, out = _learner_until_sigterm(tmp_path / "sac_pendulum", "sac_pendulum", "--resume", str(checkpoint))
    assert code == EXIT_TERMINATED and "resumed from" in out, out[-3000:]
    print(f"sac_pendulum: resumed from its checkpoint, stopped {took:.1f} s after the second SIGTERM")
