"""IMPALA and APPO with remote runners, trained from external simulators through ``rlinks learner``.

Both algorithms sample asynchronously: the driver keeps a ``sample()`` in
flight on every runner, packs ``train_batch / rollout_fragment_length``
results into one update without looking into them, and (Ray 2.60's
default, ``use_env_runner_state_server``) never sends weights to its
runners: each pulls them at the top of ``sample()``. A runner that did not
pull served its first weights for ever (training stalled at a random
policy); one that answered empty every idle poll made an update of no
episodes, which kills the learner. The shipped config runs as a user would
run it, with two dummy clients on the directory.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from harness import CARTPOLE, RLINKS, ROOT, train_through_cli
from rlinks_rllib.training.learner import EXIT_TERMINATED

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _shipped(tmp_path: Path, name: str, env_runners: dict | None = None, **stop) -> str:
    from rlinks_rllib.bundled import bundled_config

    spec = yaml.safe_load(bundled_config(name).read_text())
    spec["stop"] = {**spec["stop"], **stop}
    spec["env_runners"] = {**spec["env_runners"], **(env_runners or {})}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


#: Below the shipped config's 150 (about 80 s of training here), to keep the suite short, and far above
#: what a random policy plays (about 22): a runner that serves its first weights for ever stays there.
TARGET = 50


#: Long enough for the learner to reach its first iteration with no simulator, so it must say it waits
#: (without the wait it sampled empty results, and a pack of them killed it some 25 s later; the log line
#: below is what holds the wait here, at 25 s less of the suite's time than outliving that crash).
CLIENTS_AFTER_S = 10


#: Long enough for the two runners to answer empty some ten times between them (every 4.5 s each, below)
#: while their clients are connected: without a wait for silent simulators, a pack of those killed the learner.
PAUSE_S = 25

#: A runner with connected clients waited 0.75 of ``sample_timeout_s`` (45 s of RLlib's 60) before it answered
#: empty, so the crash took some four minutes of silence; at 6 s it answers empty every 4.5 s, as a runner
#: with no client does (every 5 s), and ten empty answers come well within the pause.
QUICK_EMPTY = {"sample_timeout_s": 6}


def test_impala_with_two_remote_runners_waits_for_absent_and_for_silent_simulators_then_learns(tmp_path):
    """The shipped IMPALA config: two remote runners, the weights reach the clients, the target is met.

    The simulators come 10 s after the learner listens, train a little,
    then pause for 25 s (connected, sending nothing) and go on. Both times
    the learner waits for them between iterations rather than pack empty
    results into an update (without the waits RLlib's learner failed with
    ``IndexError`` and training stalled), says so, and trains on.
    """
    config = _shipped(tmp_path, "impala_cartpole", QUICK_EMPTY, reward=TARGET)
    run = train_through_cli(tmp_path, ["--config", config],
                            ["-n", "2", "--", "--off-policy", "--max-steps", "1000000000",
                             "--pause-after-steps", "1000", "--pause-s", str(PAUSE_S)],
                            timeout_s=420, clients_after_s=CLIENTS_AFTER_S)
    log = run.learner_log
    assert run.returncode == 0 and run.reached >= TARGET and "IndexError" not in log, log[-3000:]
    assert "no simulator connected: IMPALA waits for one" in log
    waits = log.index("connected but silent")
    goes_on = log.index("the simulators send steps again: training goes on", waits)
    before, after = _env_steps(log[:waits]), _env_steps(log[goes_on:])
    assert after > before, log[-3000:]
    rows = (run.output / "progress.csv").read_text().splitlines()
    header, last = rows[0].split(","), rows[-1].split(",")
    assert int(last[header.index("weights_seq_no")]) > 10, rows[-1]  # pulled from the state server
    assert "running NumpyPolicy here, off-policy" in run.client_out
    print(f"\nIMPALA reached {run.reached:.1f} in {run.seconds:.0f} s, {len(rows) - 1} iterations, through a "
          f"{PAUSE_S} s pause (env steps {before} before it)")


#: Bounds of the waits in the SIGTERM test (generous for a loaded 2-core machine; what it took is printed).
SILENT_BY_S = 300
STOP_S = 60


@pytest.mark.long
def test_impala_stops_on_sigterm_while_its_simulators_are_silent(tmp_path):
    """SIGTERM while the learner waits for connected, silent simulators: it stops at once, with a checkpoint."""
    log_path = tmp_path / "learner.log"
    output = tmp_path / "run"
    config = _shipped(tmp_path, "impala_cartpole", QUICK_EMPTY, reward=None, iters=1000)
    with open(log_path, "w+") as log:
        learner = subprocess.Popen([*RLINKS, "learner", "--config", config, "--port", "0", "--output", str(output)],
                                   cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True)
        clients = None
        try:
            deadline = time.monotonic() + SILENT_BY_S
            while not (output / "endpoints.json").exists():  # written after directory.json
                assert learner.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
                time.sleep(0.5)
            address = json.loads((output / "directory.json").read_text())
            clients = subprocess.Popen([*RLINKS, "client", "--address", f"{address['host']}:{address['port']}", "-n",
                                        "2", "--", "--off-policy", "--max-steps", "1000000000",
                                        "--pause-after-steps", "1000", "--pause-s", "600"],
                                       cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            while "connected but silent" not in log_path.read_text():
                assert learner.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
                time.sleep(0.5)
            sent = time.monotonic()
            learner.send_signal(signal.SIGTERM)
            code = learner.wait(STOP_S)
            took = time.monotonic() - sent
        finally:
            for proc in (learner, clients):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGINT if proc is learner else signal.SIGTERM)
                    try:
                        proc.wait(60)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait(10)
    out = log_path.read_text()
    assert code == EXIT_TERMINATED and "IndexError" not in out, out[-3000:]
    assert "terminated (SIGTERM) after" in out and (output / "checkpoint").is_dir(), out[-3000:]
    print(f"\nIMPALA stopped {took:.1f} s after SIGTERM with its simulators connected and silent")


def test_a_runner_with_a_silent_client_answers_empty_soon_and_says_it_is_quiet(ray_local):
    """APPO's runner, a client connected that sends nothing: ``sample()`` answers empty after at most 5 s (it
    waited 45 s of RLlib's 60 s ``sample_timeout_s``, with the learner's question queued behind) and reports
    ``quiet_s``, which the learner waits on; the first step that comes ends it."""
    import numpy as np
    from ray.rllib.algorithms.appo import APPOConfig

    from rlinks_rllib import RLinkEnvRunner
    from rlinks_rllib.client import RLinkClient
    from rlinks_rllib.protocol.episode_builder import EpisodeBuilder

    config = (APPOConfig()
              .environment(observation_space=CARTPOLE.observation_space, action_space=CARTPOLE.action_space,
                           env_config={"port": 0})
              .env_runners(num_env_runners=0, rollout_fragment_length=50))
    runner = RLinkEnvRunner(config=config, worker_index=0)
    client = RLinkClient("{}:{}".format(*runner.address), timeout=30.0)
    try:
        client.connect()
        deadline = time.monotonic() + 30
        while runner.get_transport_stats()["clients_connected"] < 1:
            assert time.monotonic() < deadline, "the client never connected"
            time.sleep(0.1)
        started = time.monotonic()
        assert runner.sample() == []
        took = time.monotonic() - started
        assert runner.get_transport_stats()["quiet_s"] > 0
        builder, obs = EpisodeBuilder(), np.zeros(4, np.float32)
        builder.reset(obs)
        for _ in range(50):
            builder.step(0, 1.0, obs, False, False,
                         extra={"action_logp": np.float32(-0.69), "action_dist_inputs": np.zeros(2, np.float32)})
        client.send_episodes(builder.take_chunks())
        deadline = time.monotonic() + 30
        while runner.get_transport_stats()["quiet_s"] > 0:  # until the steps came
            assert time.monotonic() < deadline, "the steps never came"
            time.sleep(0.1)
        assert sum(len(episode) for episode in runner.sample()) == 50
        assert runner.get_transport_stats()["quiet_s"] == 0
    finally:
        client.close()
        runner.stop()
    print(f"\nan empty sample() with a silent client connected took {took:.1f} s")


def _env_steps(log: str) -> int:
    """The env steps of the last iteration line in ``log``."""
    return int(re.findall(r"env steps\s+([\d,]+)", log)[-1].replace(",", ""))


def test_a_stopping_runner_of_appo_leaves_what_it_holds_unconfirmed(ray_local):
    """SIGTERM under IMPALA or APPO (``stop_handing``): the driver ends its iteration without the result of a
    ``sample()`` under way, so that result hands nothing over and confirms nothing; the steps stay for the
    learner that resumes (a reliable client sends them again)."""
    import threading

    import numpy as np
    from ray.rllib.algorithms.appo import APPOConfig

    from rlinks_rllib import RLinkEnvRunner
    from rlinks_rllib.client import RLinkClient
    from rlinks_rllib.protocol.episode_builder import EpisodeBuilder

    config = (APPOConfig()
              .environment(observation_space=CARTPOLE.observation_space, action_space=CARTPOLE.action_space,
                           env_config={"port": 0})
              .env_runners(num_env_runners=0, rollout_fragment_length=50, sample_timeout_s=3600.0))
    runner = RLinkEnvRunner(config=config, worker_index=0)
    client = RLinkClient("{}:{}".format(*runner.address), timeout=30.0)
    try:
        builder, obs = EpisodeBuilder(), np.zeros(4, np.float32)
        builder.reset(obs)
        for _ in range(20):  # less than the fragment (50) the sample() below waits for
            builder.step(0, 1.0, obs, False, False,
                         extra={"action_logp": np.float32(-0.69), "action_dist_inputs": np.zeros(2, np.float32)})
        client.send_episodes(builder.take_chunks())
        deadline = time.monotonic() + 30
        while runner.server.inbox.steps < 20:
            assert time.monotonic() < deadline, "the steps never came"
            time.sleep(0.05)
        got: list = []
        sampling = threading.Thread(target=lambda: got.append(runner.sample()), daemon=True)
        sampling.start()
        time.sleep(1.0)  # waiting for the rest of its fragment
        runner.stop_handing()
        sampling.join(10)
        assert not sampling.is_alive() and got == [[]]
        assert runner.server.inbox.steps == 20 and runner.server.stats.batches_acked == 0
    finally:
        client.close()
        runner.stop()
