"""The Godot addon (``clients/godot/``): GDScript run by the real engine, headless.

The engine is Debian's ``godot3-server`` (Godot 3.2.3), installed with apt
where the suite runs as root (``tests/system_packages.py``), else skipped
with a loud line. Two GDScript test scripts hold the addon to the shared
vectors: ``tests/vectors.gd`` replays every frame vector through its framing,
codec and message checks (in one piece, byte by byte and in pieces of 7) and
re-encodes what it decoded, and ``tests/policy.gd`` runs its MLP on the
policy vectors. Then the demo game (``clients/godot/demo``: balls that chase
targets, on Godot's physics) trains through a real ``rlinks learner``: four
agents in one game with served actions to its config's target, the game
started before the learner is up (``connect_wait``) and its link cut once on
the way (it connects again); and two game instances
on one runner, one served and one running RLlib's MLP in GDScript, sent
there by the learner's directory, with the runner recording what they send.
The two training runs start with the session and run beside the other tests
(``tests/head_start.py``).
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

from system_packages import require_debian_packages

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "clients" / "godot"
VECTORS = ROOT / "tests" / "vectors"
DEMO_CONFIG = ROOT / "configs" / "godot_ball_chase.yaml"
RLINKS = [sys.executable, "-m", "rlinks_rllib"]
GODOT_PACKAGE = "godot3-server"
PURPOSE = "the Godot addon's tests (GDScript in the real engine, headless)"
#: How long the games wait for the learner they start before.
CONNECT_WAIT_S = 180
#: The game's last line but one when it stops on its own: "rlinks: N env steps in S s (X steps/s, MODE inference)".
STEPS_LINE = re.compile(r"rlinks: (\d+) env steps in ([\d.]+) s \((\d+) steps/s, (\w+) inference\)")


def godot_binary() -> str:
    require_debian_packages(GODOT_PACKAGE, purpose=PURPOSE)
    found = shutil.which(GODOT_PACKAGE)
    assert found, f"dpkg says {GODOT_PACKAGE} is installed, but it is not on PATH"
    return found


def godot_command(*args: str) -> list[str]:
    """The engine, headless, on the addon's project (clients/godot), with ``args``."""
    return [godot_binary(), "--no-window", "--path", str(PROJECT), *args]


def run_gdscript(script: str, *args: str, timeout_s: float = 120) -> None:
    """Run one of the project's test scripts (``-s res://tests/...``); fails on a non-zero exit or a script error."""
    done = subprocess.run(godot_command("-s", script, *args), capture_output=True, text=True, timeout=timeout_s)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "SCRIPT ERROR" not in output, output[-3000:]


def test_the_codec_replays_every_vector(tmp_path):
    """Every vector in tests/vectors, in three ways of cutting it: the error code, when it comes, the messages
    before it; and every valid one (all are canonical) re-encodes from the decoded values to the .bin's bytes."""
    out = tmp_path / "vectors.json"
    run_gdscript("res://tests/vectors.gd", f"--vectors={VECTORS}", f"--out={out}")
    results = json.loads(out.read_text())
    bins = sorted(p.stem for p in VECTORS.glob("*.bin"))
    assert sorted(results) == bins
    for name in bins:
        spec = json.loads((VECTORS / f"{name}.json").read_text())
        error = spec["error"]
        for cut in results[name]["passes"]:
            assert cut["code"] == (error and error["code"]), (name, cut)
            assert cut["when"] == (error and error["when"]), (name, cut)
            assert cut["messages"] == len(spec["messages"]), (name, cut)
        if spec["canonical"]:
            assert bytes.fromhex(results[name]["reencoded"]) == (VECTORS / f"{name}.bin").read_bytes(), name
    print(f"\n{len(bins)} vectors replayed by GDScript in godot3-server")


def test_the_gdscript_mlp_matches_the_policy_vectors(tmp_path):
    """RLlib's default MLP in GDScript: distribution inputs and log-probabilities as the Python client's,
    and the weight sets that do not fit their action space refused."""
    out = tmp_path / "policy.json"
    run_gdscript("res://tests/policy.gd", f"--vectors={VECTORS / 'policy'}", f"--out={out}")
    got = json.loads(out.read_text())
    mlp = json.loads((VECTORS / "policy" / "mlp.json").read_text())
    for case in mlp["cases"]:
        computed = got["mlp"][case["name"]]
        assert computed["refused"] == "", (case["name"], computed["refused"])
        np.testing.assert_allclose(computed["dist_inputs"], case["dist_inputs"], atol=1e-4, err_msg=case["name"])
    for case in mlp["refused"]:
        assert got["refused"][case["name"]], f"{case['name']}: accepted"
    logp = json.loads((VECTORS / "policy" / "logp.json").read_text())
    assert got["logp"] == pytest.approx([case["logp"] for case in logp["cases"]], abs=1e-4)


def test_the_addons_message_types_are_pythons():
    """messages.gd's tables name every MessageType and nothing else, with RLlib's old API types apart."""
    from rlinks_rllib.protocol.messages import MessageType

    source = (PROJECT / "addons" / "rlinks" / "messages.gd").read_text()
    required = source[source.index("const REQUIRED"):source.index("const OPTIONAL")]
    old_api = source[source.index("const OLD_API_TYPES"):]
    old_api = old_api[:old_api.index("]")]
    named = set(re.findall(r'^\s*"([A-Z_]+)": \{', required, re.M)) | set(
        re.findall(r'"([A-Z_]+)": \{\}', required)) | set(re.findall(r'"([A-Z_]+)"', old_api))
    assert named == {member.value for member in MessageType}


def test_a_game_waits_connect_wait_for_a_learner_then_quits_saying_why():
    """Nothing listens: the game tries for $RLINKS_CONNECT_WAIT_S seconds, then exits 1 with a line that says so."""
    port = _free_port()
    done = subprocess.run(godot_command(f"--rlinks-address=127.0.0.1:{port}"), capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, RLINKS_CONNECT_WAIT_S="2"))
    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-3000:]
    assert f"connection_failed: nothing answered at 127.0.0.1:{port} for 2 s (connect_wait" in output, output[-3000:]


@dataclass
class GodotRun:
    """What a training run of the demo left: the learner's log and exit, each game's output and exit."""

    learner_log: str
    learner_code: int
    games: list[tuple[int, str]]
    seconds: float
    output: Path

    @property
    def reached(self) -> float:
        found = re.search(r"done: mean return (-?[\d.]+)", self.learner_log)
        assert found, self.learner_log[-3000:]
        return float(found.group(1))

    def steps_per_s(self) -> dict[str, int]:
        """Each game's env steps per second, by inference mode."""
        return {m.group(4): int(m.group(3)) for _, out in self.games for m in STEPS_LINE.finditer(out)}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _stop(process: subprocess.Popen, sig: int) -> None:
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


class CuttingRelay:
    """A TCP relay on 127.0.0.1 to the learner's ``port`` that cuts its first connection once the game has sent
    ``cut_after`` bytes through it: a link that drops mid-training. It listens on ``self.port`` only once the
    learner does, so a game started before both waits for it as for the learner itself."""

    def __init__(self, port: int, cut_after: int) -> None:
        self.port, self._target, self._cut_after = _free_port(), port, cut_after
        self.cut = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="cutting relay", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=10)

    def _serve(self) -> None:
        while not self._stopped.is_set():  # wait for the learner
            try:
                socket.create_connection(("127.0.0.1", self._target), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        with socket.create_server(("127.0.0.1", self.port)) as listener:
            listener.settimeout(0.5)
            while not self._stopped.is_set():
                try:
                    game, _ = listener.accept()
                except socket.timeout:
                    continue
                upstream = socket.create_connection(("127.0.0.1", self._target), timeout=10)
                cut_after = None if self.cut.is_set() else self._cut_after
                threading.Thread(target=self._relay, args=(game, upstream, cut_after), daemon=True).start()

    def _relay(self, game: socket.socket, upstream: socket.socket, cut_after: int | None) -> None:
        sent = 0
        with game, upstream:
            while not self._stopped.is_set():
                readable, _, _ = select.select([game, upstream], [], [], 0.5)
                for side in readable:
                    data = side.recv(65536)
                    if not data:
                        return
                    (upstream if side is game else game).sendall(data)
                    sent += len(data) if side is game else 0
                if cut_after is not None and sent >= cut_after:
                    self.cut.set()
                    return


def _start_games(tmp_path: Path, address: str, games: list[list[str]]) -> list[subprocess.Popen]:
    # A learner's start (Ray's) can take over a minute while the rest of the suite shares the cores.
    wait = dict(os.environ, RLINKS_CONNECT_WAIT_S=str(CONNECT_WAIT_S))
    players = []
    for i, args in enumerate(games):
        with open(tmp_path / f"game{i}.log", "w") as out:  # the game writes to its own copy of the file
            players.append(subprocess.Popen(godot_command(f"--rlinks-address={address}", *args), env=wait,
                                            stdout=out, stderr=subprocess.STDOUT))
    return players


def _listening_at(output: Path, learner: subprocess.Popen, log: Path) -> str:
    """Where games connect to a learner started with ``--port 0``: its directory, else its one runner."""
    deadline = time.monotonic() + 300
    while not (output / "endpoints.json").exists():  # written after directory.json
        assert learner.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "the learner never listened"
        time.sleep(0.5)
    if (output / "directory.json").exists():
        found = json.loads((output / "directory.json").read_text())
    else:
        found = json.loads((output / "endpoints.json").read_text())[0]
    return f"{found['host']}:{found['port']}"


def train_the_demo(tmp_path: Path, config: dict, games: list[list[str]], cancelled: threading.Event,
                   timeout_s: float, games_first: bool, cut_after: int | None = None) -> GodotRun:
    """``rlinks learner`` on ``config``, and the games (godot3-server on the demo, each with its arguments).

    ``games_first``: the games start before the learner, at a port found free just before, and wait for it
    (connect_wait); else the learner takes any free port and the games start once it listens (a learner
    with remote runners takes the ports after its own too, which only it can find free). Waits until the
    learner stops (its stop rule) within ``timeout_s``, a game fails, or ``cancelled`` is set; then stops
    whatever still runs (the learner with SIGINT, so it stops Ray itself). ``cut_after`` (with
    ``games_first``): the games reach the learner through a :class:`CuttingRelay`.
    """
    config_path = tmp_path / "godot.yaml"
    config_path.write_text(yaml.safe_dump(config))
    started = time.monotonic()
    port = _free_port() if games_first else 0
    relay = CuttingRelay(port, cut_after) if cut_after else None
    players = _start_games(tmp_path, f"127.0.0.1:{relay.port if relay else port}", games) if games_first else []
    log = tmp_path / "learner.log"
    with open(log, "w") as out:
        learner = subprocess.Popen([*RLINKS, "learner", "--config", str(config_path), "--port", str(port),
                                    "--output", str(tmp_path / "run")], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        if not games_first:
            players = _start_games(tmp_path, _listening_at(tmp_path / "run", learner, log), games)
        deadline = time.monotonic() + timeout_s
        while learner.poll() is None:
            for i, player in enumerate(players):
                assert player.poll() in (None, 0), (tmp_path / f"game{i}.log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"the learner did not stop within {timeout_s:.0f} s"
            if cancelled.is_set():
                raise RuntimeError("the Godot training run was cancelled before its learner stopped")
            time.sleep(1)
        for player in players:
            player.wait(timeout=60)  # the learner said shutting_down: each game quits on its own
    finally:
        for player in players:
            _stop(player, signal.SIGTERM)
        _stop(learner, signal.SIGINT)
        if relay:
            relay.close()
    return GodotRun(log.read_text(), learner.returncode,
                    [(player.returncode, (tmp_path / f"game{i}.log").read_text()) for i, player in enumerate(players)],
                    time.monotonic() - started, tmp_path)


#: Bound of each run from its start: about a minute alone; the suite's other tests share the two cores.
RUN_BOUND_S = 420


#: Where the demo's link is cut: after about two PPO iterations of 4 agents' ACTs (some 350 bytes a decision).
CUT_AFTER_BYTES = 400_000


def _four_agents_served(tmp_path: Path, cancelled: threading.Event) -> GodotRun:
    godot_binary()  # installs it, or skips the test
    return train_the_demo(tmp_path, yaml.safe_load(DEMO_CONFIG.read_text()), [["--agents=4"]], cancelled,
                          RUN_BOUND_S - 60, games_first=True, cut_after=CUT_AFTER_BYTES)


@pytest.mark.slow
@pytest.mark.head_start(_four_agents_served, bound_s=RUN_BOUND_S)
def test_the_demo_trains_to_its_target_with_four_agents_in_the_engine_through_a_dropped_link(head_start):
    """Started before the learner, the game waits for it; its link is cut after two iterations or so, and it
    connects again and plays on (new episodes: the runner closed the open ones)."""
    run = head_start
    target = yaml.safe_load(DEMO_CONFIG.read_text())["stop"]["reward"]
    assert run.learner_code == 0 and run.reached >= target, (run.learner_log[-3000:], run.games)
    code, out = run.games[0]
    assert code == 0 and "rlinks: the learner ended the run" in out and "SCRIPT ERROR" not in out, out[-3000:]
    assert "rlinks: closed: the learner closed the connection; connecting again" in out, out[-3000:]
    print(f"\nthe Godot demo reached {run.reached:.1f} (target {target}) in {run.seconds:.0f} s with 4 agents; "
          f"env steps/s in the engine: {run.steps_per_s()}")


#: The second run's target: clearly above a random policy's (about 0.3), reached in about half the first's steps.
TWO_GAMES_TARGET = 5.0


def _two_games_served_and_local(tmp_path: Path, cancelled: threading.Event) -> GodotRun:
    """One remote runner: the games are given the learner's base port, its directory, which sends them there.
    The runner records what it hands RLlib (``record_dir``), the served game's episodes included."""
    godot_binary()
    config = yaml.safe_load(DEMO_CONFIG.read_text())
    config["stop"]["reward"] = TWO_GAMES_TARGET
    config["env_runners"]["num_env_runners"] = 1
    config["rlinks"]["record_dir"] = str(tmp_path / "recording")
    return train_the_demo(tmp_path, config, [["--agents=2", "--rlinks-inference=served"],
                                             ["--agents=2", "--rlinks-inference=local"]], cancelled, RUN_BOUND_S - 60,
                          games_first=False)


@pytest.mark.slow
@pytest.mark.head_start(_two_games_served_and_local, bound_s=RUN_BOUND_S)
def test_two_game_instances_one_served_one_local_train_on_one_runner_found_by_the_directory(head_start):
    run = head_start
    assert run.learner_code == 0 and run.reached >= TWO_GAMES_TARGET, (run.learner_log[-3000:], run.games)
    assert re.search(r"clients\s+2 ", run.learner_log), run.learner_log[-3000:]
    for code, out in run.games:
        assert code == 0 and "rlinks: the learner ended the run" in out and "SCRIPT ERROR" not in out, out[-3000:]
    assert set(run.steps_per_s()) == {"served", "local"}
    recorded = [p for p in (run.output / "recording").rglob("*") if p.is_file()]
    assert recorded, "the runner recorded nothing"
    print(f"\ntwo Godot games on one runner reached {run.reached:.1f} in {run.seconds:.0f} s; "
          f"env steps/s per game: {run.steps_per_s()}")
