"""The ``rlinks`` command as a person types it."""

from __future__ import annotations

import csv
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import RLINKS, ROOT


def rlinks(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*RLINKS, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_help_reads_well():
    learner = rlinks("learner", "--help")
    assert learner.returncode == 0
    for flag in ("--config", "--host", "--port", "--num-env-runners", "--gpu-num", "--num-learners",
                 "--stop-reward", "--stop-iters", "--checkpoint-every", "--output", "--resume"):
        assert flag in learner.stdout
    client = rlinks("client", "--help")
    assert client.returncode == 0 and "--address" in client.stdout and "--script" in client.stdout


def test_a_wrong_flag_says_so():
    result = rlinks("learner", "--config", "configs/ppo_cartpole.yaml", "--gpus", "1")
    assert result.returncode == 2
    assert "unrecognized arguments: --gpus" in result.stderr


def test_broken_yaml_names_the_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("algorithm: PPO\nspaces:\n  from_env: CartPole-v1\n training: {lr: 1}\n")
    result = rlinks("learner", "--config", str(bad))
    assert result.returncode == 1
    assert f"{bad}:4:" in result.stderr and "not valid YAML" in result.stderr


def test_unknown_setting_names_the_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("algorithm: PPO\nspaces:\n  from_env: CartPole-v1\ntraining:\n  lr: 0.001\n  learning_rat: 1\n")
    result = rlinks("learner", "--config", str(bad), timeout=120)
    assert result.returncode == 1
    assert f"{bad}:6:" in result.stderr and "learning_rat" in result.stderr


def test_unknown_section_names_the_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("algorithm: PPO\nspaces:\n  from_env: CartPole-v1\ntrainig: {}\n")
    result = rlinks("learner", "--config", str(bad))
    assert result.returncode == 1
    assert f"{bad}:4:" in result.stderr and "unknown section 'trainig'" in result.stderr


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_each_client_summary_is_printed_as_one_whole_line(tmp_path, monkeypatch):
    """The copies' reader threads share stdout: each line goes out in one write, so two never run together."""
    from rlinks_rllib.training.clients import ClientProcesses

    script = tmp_path / "client.py"
    script.write_text("import sys\nprint('summary: steps=10 ' + 'x' * 4000 + ' ' + sys.argv[2])\n")
    writes: list[str] = []

    class Recorder:
        def write(self, text: str) -> int:
            writes.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    monkeypatch.setattr(sys, "stdout", Recorder())
    group = ClientProcesses(script, ["a:1", "b:2"])
    assert group.wait(timeout=30) == [0, 0]
    assert sorted(writes) == [f"[client 0] summary: steps=10 {'x' * 4000} a:1\n",
                              f"[client 1] summary: steps=10 {'x' * 4000} b:2\n"]


_CHATTY_CLIENT = """\
import logging, os, sys, warnings
index = os.environ["RLINKS_CLIENT_INDEX"]
print("args", sys.argv[1:])
print("progress: steps=10")
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
logging.getLogger("sim").info("connected")
logging.getLogger("sim").warning("a slow frame")
warnings.warn("a knob that goes away")
print("summary: copy=" + index, flush=True)
if index == "1":
    raise RuntimeError("the simulator crashed")
"""


@pytest.mark.parametrize("quiet", [False, True], ids=["everything", "quiet"])
def test_client_scripts_get_the_address_their_args_and_index_and_their_output_is_shown(tmp_path, quiet):
    """The contract of `rlinks client --script` (docs/CLIENTS.md): what a copy gets, which of its lines show."""
    script = tmp_path / "sim.py"
    script.write_text(_CHATTY_CLIENT)
    result = rlinks("client", "--address", "127.0.0.1:1", "-n", "2", "--script", str(script),
                    *(["--quiet"] if quiet else []), "--", "--envs", "4")
    lines = result.stdout.splitlines()
    assert result.returncode == 1, result.stdout + result.stderr  # copy 1 failed
    for index in (0, 1):
        mine = [line for line in lines if line.startswith(f"[client {index}] ")]
        text = "\n".join(mine)
        assert f"[client {index}] summary: copy={index}" in mine, result.stdout
        assert f"[client {index}] WARNING sim: a slow frame" in mine, result.stdout
        assert "UserWarning: a knob that goes away" in text, result.stdout
        shown = f"[client {index}] args ['--address', '127.0.0.1:1', '--envs', '4']" in mine
        assert shown is not quiet and ("progress: steps=10" in text) is not quiet, result.stdout
        assert (f"[client {index}] INFO sim: connected" in mine) is not quiet, result.stdout
    crash = [line for line in lines if line.startswith("[client 1] ")]
    start = crash.index("[client 1] Traceback (most recent call last):")
    assert crash[-1] == "[client 1] RuntimeError: the simulator crashed", result.stdout
    assert all(line.startswith("[client 1]   ") for line in crash[start + 1:-1]), result.stdout  # the whole traceback


_GAME = """\
import sys
sys.path.insert(0, {examples!r})
from dummy_cartpole_client import CartPole


class Game:
    def __init__(self, seed):
        self.env = CartPole(seed)

    def reset(self):
        return self.env.reset()[0]

    def step(self, action):
        obs, reward, terminated, truncated, _ = self.env.step(action)
        return obs, reward, terminated or truncated
"""


def test_the_script_in_clients_md_runs_under_rlinks_client(tmp_path):
    """docs/CLIENTS.md's script as printed (a CartPole for its game) under `rlinks client -n 2 -- --max-steps N`."""
    from peers import RLinkTestServer
    from test_env_client import our_weights

    code = re.search(r"```python\n(.*?)```", (ROOT / "docs" / "CLIENTS.md").read_text(), re.S).group(1)
    (tmp_path / "my_sim.py").write_text(code)
    (tmp_path / "my_game.py").write_text(_GAME.format(examples=str(ROOT / "examples")))
    server = RLinkTestServer(on_message=our_weights, extensions=("want_steps", "ack")).start()
    try:
        result = rlinks("client", "--address", server.address, "-n", "2", "--script", str(tmp_path / "my_sim.py"),
                        "--", "--max-steps", "300", timeout=120)
    finally:
        server.stop()
    assert result.returncode == 0, result.stdout + result.stderr
    summaries = sorted(line.split(" episodes=")[0] for line in result.stdout.splitlines() if "summary:" in line)
    assert summaries == ["[client 0] summary: steps=300", "[client 1] summary: steps=300"], result.stdout


def test_learner_and_clients_with_two_cpu_learners(tmp_path):
    """`rlinks learner` with --num-learners 2 on the CPU trains clients that `rlinks client` starts.

    The target can't be met in 3 iterations, so the learner must say so and exit 2,
    leaving its checkpoint, CSV and curve behind. None of the lines Ray and RLlib print that
    no one can act on (training/quiet.py) shows, from the driver or from a runner or learner.
    """
    from rlinks_rllib.training import quiet

    output = tmp_path / "run"
    learner = subprocess.Popen(
        [*RLINKS, "learner", "--config", "configs/ppo_cartpole.yaml", "--port", "0", "--num-env-runners", "1",
         "--num-learners", "2", "--stop-iters", "3", "--stop-reward", "100000", "--output", str(output)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    clients = None
    try:
        deadline = time.monotonic() + 120
        while not (output / "endpoints.json").exists():
            assert learner.poll() is None, learner.stdout.read()
            assert time.monotonic() < deadline, "the learner never listened"
            time.sleep(0.5)
        endpoints = rlinks("endpoints", str(output))
        assert endpoints.returncode == 0 and "runner 1: 127.0.0.1:" in endpoints.stdout
        # The one address: the learner's directory, which sends clients on to a runner.
        directory = json.loads((output / "directory.json").read_text())
        one_address = f"{directory['host']}:{directory['port']}"
        live = rlinks("endpoints", one_address)
        assert live.returncode == 0 and "runner 1: 127.0.0.1:" in live.stdout, live.stderr
        clients = subprocess.Popen(
            [*RLINKS, "client", "--address", one_address, "-n", "2"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        out, _ = learner.communicate(timeout=300)
        client_out, _ = clients.communicate(timeout=60)
    finally:
        for proc in (learner, clients):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    assert learner.returncode == 2, out
    assert "stopped: mean return" in out and "iter    3 |" in out
    known = [k.message for k in quiet.KNOWN_WARNINGS + quiet.KNOWN_LOG_LINES]
    shown = [p for p in known if re.search(p, out, re.M)] + [p.pattern for p in quiet.KNOWN_STDERR_LINES
                                                             if p.search(out.encode())]
    assert not shown, out
    assert client_out.count("summary: steps=") == 2, client_out
    rows = list(csv.DictReader(open(output / "progress.csv")))
    assert [int(r["iteration"]) for r in rows] == [1, 2, 3]
    assert int(rows[-1]["env_steps"]) >= 6000
    assert (output / "learning_curve.png").stat().st_size > 1000
    assert (output / "checkpoint").is_dir()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_multi_agent_learner_and_clients_reach_the_configs_target(tmp_path):
    """`rlinks learner --config configs/ppo_multi_agent.yaml` with two `multi_agent_client.py` copies reaches its target.

    The config states the target (stop.reward); the live view and progress.csv show the return per policy.
    """
    output = tmp_path / "run"
    learner = subprocess.Popen(
        [*RLINKS, "learner", "--config", "configs/ppo_multi_agent.yaml", "--port", "0", "--output", str(output)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    clients = None
    try:
        deadline = time.monotonic() + 120
        while not (output / "endpoints.json").exists():
            assert learner.poll() is None, learner.stdout.read()
            assert time.monotonic() < deadline, "the learner never listened"
            time.sleep(0.5)
        (runner,) = json.loads((output / "endpoints.json").read_text())
        clients = subprocess.Popen(
            [*RLINKS, "client", "--address", f"{runner['host']}:{runner['port']}", "-n", "2",
             "--script", "examples/multi_agent_client.py"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        out, _ = learner.communicate(timeout=480)
        client_out, _ = clients.communicate(timeout=60)
    finally:
        for proc in (learner, clients):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    assert learner.returncode == 0, out
    assert "done: mean return" in out and "| seeker " in out and "| signal " in out, out
    assert client_out.count("summary: env_steps=") == 2, client_out
    rows = list(csv.DictReader(open(output / "progress.csv")))
    assert float(rows[-1]["episode_return_mean"]) >= 90
    assert float(rows[-1]["return_seeker"]) > 0 and float(rows[-1]["return_signal"]) > 0
    assert (output / "learning_curve.png").stat().st_size > 1000
