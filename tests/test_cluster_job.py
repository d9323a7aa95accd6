"""The learner as a ``ray job submit`` job on a local cluster, simulators outside it.

A head node on loopback with its own temp dir, token and ports; the learner
submitted with ``--working-dir .``; dummy clients started by the test (not
the job) against the runners the learner lists; the job must end SUCCEEDED.
Teardown stops that cluster and only that one (never ``ray stop``, which
ends every Ray on the machine), then checks none of its processes is left.
docs/CLUSTER.md ("Running on a cluster") tells the same story for people.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from harness import dummy_client_cmd, processes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SCRIPT = ROOT / "examples" / "cluster" / "run_local_cluster.sh"
CONFIG = "configs/ppo_cartpole.yaml"
STOP_REWARD = 150
STOP_ITERS = 40
CLIENTS_PER_RUNNER = 2

HEAD_START_TIMEOUT_S = 90
JOB_TIMEOUT_S = 240
DRAIN_TIMEOUT_S = 5
HEAD_STOP_TIMEOUT_S = 30
LEFTOVER_TIMEOUT_S = 10
CLI_TIMEOUT_S = 60
POLL_S = 1.0
SUBMIT_ATTEMPTS = 3
SUBMIT_RETRY_S = 5
FINAL_STATUSES = ("SUCCEEDED", "FAILED", "STOPPED")
# The file a plain `ray.init()` reads to find "the" cluster; ours must never be named there.
DEFAULT_ADDRESS_FILE = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"

# Head-node servers that get an explicit free port, so this cluster collides
# with no other Ray on the machine (tests of others may run one in parallel).
PORT_FLAGS = ("--port", "--dashboard-port", "--node-manager-port", "--object-manager-port",
              "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port",
              "--metrics-export-port", "--ray-client-server-port")


def _need_job_submission() -> None:
    if not (BIN / "ray").exists() or shutil.which("rlinks", path=str(BIN)) is None:
        pytest.skip(f"needs the ray and rlinks commands next to {sys.executable}")
    pytest.importorskip("aiohttp", reason="`ray job submit` needs ray[default] (the dashboard's job server)")


def _free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


# -- processes, from /proc (no psutil here) -------------------------------------------------


def _stat(pid: int) -> tuple[int, str, str] | None:
    """``(ppid, state, starttime)`` of a process; ``None`` once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), fields[0], fields[19]


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _descendants(root: int) -> set[tuple[int, str]]:
    """``(pid, starttime)`` of every live process below ``root``; starttime guards against pid reuse."""
    children: dict[int, list[tuple[int, str]]] = {}
    for pid in _all_pids():
        stat = _stat(pid)
        if stat is not None:
            children.setdefault(stat[0], []).append((pid, stat[2]))
    found: set[tuple[int, str]] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child[0])
    return found


def _alive(process: tuple[int, str]) -> bool:
    stat = _stat(process[0])
    return stat is not None and stat[2] == process[1] and stat[1] != "Z"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _mentioning(text: str) -> list[int]:
    """Live processes whose command line contains ``text``."""
    found = []
    for pid in _all_pids():
        stat = _stat(pid)
        if text in _cmdline(pid) and stat is not None and stat[1] != "Z":
            found.append(pid)
    return found


# -- the cluster ---------------------------------------------------------------------------


@dataclass
class LocalCluster:
    """A head node this test started, and how to talk to it."""

    temp_dir: Path
    env: dict
    ports: dict
    head: subprocess.Popen

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.ports['--dashboard-port']}"

    def ray(self, *args: str, timeout: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess:
        """The ``ray`` CLI against this cluster, from the repository root."""
        return subprocess.run([str(BIN / "ray"), *args], cwd=ROOT, env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def job_status(self, job_id: str) -> str:
        """The job's status from the job server's REST API (``GET /api/jobs/ID``).

        ``UNREACHABLE`` when the server did not answer this time; callers poll.
        """
        token = Path(self.env["RAY_AUTH_TOKEN_PATH"]).read_text().strip()
        request = urllib.request.Request(f"{self.dashboard}/api/jobs/{job_id}",
                                         headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=CLI_TIMEOUT_S) as response:
                return json.load(response)["status"]
        except OSError as exc:  # URLError, HTTPError, timeouts
            warnings.warn(f"job server did not answer: {exc}")
            return "UNREACHABLE"

    def job_logs(self, job_id: str) -> str:
        result = self.ray("job", "logs", "--address", self.dashboard, job_id)
        return result.stdout + result.stderr


def _cluster_env(temp_dir: Path) -> dict:
    env = {key: value for key, value in os.environ.items()
           if key not in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_AUTH_TOKEN")}
    token_path = temp_dir / "auth_token"
    token_path.write_text(os.urandom(32).hex())
    token_path.chmod(0o600)
    env.update(
        # The job runs with the environment of `ray start`: its PATH must hold `rlinks`.
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        # Token authentication with this cluster's own token; the CLI sends it
        # only when RAY_AUTH_MODE=token is set on its side as well.
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN_PATH=str(token_path),
        PYTHONUNBUFFERED="1",
    )
    return env


def _wait_until_ready(cluster: LocalCluster) -> None:
    deadline = time.monotonic() + HEAD_START_TIMEOUT_S
    while True:
        if cluster.head.poll() is not None:
            pytest.fail(f"`ray start` exited with {cluster.head.returncode}: "
                        f"{(cluster.temp_dir / 'head.log').read_text()[-3000:]}")
        if cluster.ray("job", "list", "--address", cluster.dashboard).returncode == 0:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"the job server did not answer within {HEAD_START_TIMEOUT_S}s: "
                        f"{(cluster.temp_dir / 'head.log').read_text()[-3000:]}")
        time.sleep(POLL_S)


def _wait_gone(processes: set[tuple[int, str]], timeout: float) -> set[tuple[int, str]]:
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in processes) and time.monotonic() < deadline:
        time.sleep(0.2)
    return {p for p in processes if _alive(p)}


def _stop(cluster: LocalCluster) -> tuple[list[str], list[str]]:
    """Stop this cluster's processes and no others: ``(force-killed, still alive)``."""
    ours = _descendants(cluster.head.pid)
    # SIGTERM makes `ray start --block` stop its node's processes (GCS, raylet,
    # dashboard); workers and the job's driver follow their raylet and supervisor.
    cluster.head.send_signal(signal.SIGTERM)
    try:
        cluster.head.wait(HEAD_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        cluster.head.kill()
        cluster.head.wait(LEFTOVER_TIMEOUT_S)
    survivors = _wait_gone(ours, LEFTOVER_TIMEOUT_S)
    # GCS, raylet and the dashboard name the temp dir on their command lines.
    for pid in _mentioning(str(cluster.temp_dir)):
        stat = _stat(pid)
        if stat is not None:
            survivors.add((pid, stat[2]))
    # Agents can linger for a while once the GCS is gone (they try to report
    # to it); they are ours for sure (same pid and start time), so kill them.
    forced = [f"{pid} {_cmdline(pid)[:100].strip()}" for pid, _ in survivors]
    for pid, _ in survivors:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    left = [f"{pid} {_cmdline(pid)[:100].strip()}" for pid, _ in _wait_gone(survivors, LEFTOVER_TIMEOUT_S)]
    return forced, left


@pytest.fixture
def local_cluster() -> Iterator[LocalCluster]:
    """A one-node Ray cluster on 127.0.0.1 with its own temp dir, token and ports."""
    _need_job_submission()
    # Short on purpose: Ray's Unix socket paths live under it (108-byte limit).
    temp_dir = Path(tempfile.mkdtemp(prefix="rlc-", dir="/tmp"))
    env = _cluster_env(temp_dir)
    ports = dict(zip(PORT_FLAGS, _free_ports(len(PORT_FLAGS))))
    command = [str(BIN / "ray"), "start", "--head", "--block", "--disable-usage-stats",
               "--node-ip-address", "127.0.0.1", "--num-cpus", "4", "--temp-dir", str(temp_dir),
               "--include-dashboard", "true", "--dashboard-host", "127.0.0.1"]
    for flag, port in ports.items():
        command += [flag, str(port)]
    with open(temp_dir / "head.log", "w") as log:
        # On SIGTERM, Ray 2.60 first drains the node for up to 30 s while work is running.
        head_env = {**env, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": str(DRAIN_TIMEOUT_S)}
        head = subprocess.Popen(command, cwd=ROOT, env=head_env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    cluster = LocalCluster(temp_dir=temp_dir, env=env, ports=ports, head=head)
    try:
        _wait_until_ready(cluster)
        yield cluster
    finally:
        forced, left = _stop(cluster)
        gcs = f":{ports['--port']}"
        named = DEFAULT_ADDRESS_FILE.exists() and gcs in DEFAULT_ADDRESS_FILE.read_text()
        shutil.rmtree(temp_dir, ignore_errors=True)
        if forced:
            warnings.warn(f"killed processes that outlived the test's cluster by {LEFTOVER_TIMEOUT_S}s: {forced}")
        assert not left, f"processes of the test's cluster survive even SIGKILL: {left}"
        assert not named, f"{DEFAULT_ADDRESS_FILE} names the test's cluster; a plain ray.init() would hang on it"


def _submit(cluster: LocalCluster, job_id: str, entrypoint: list[str]) -> None:
    """``ray job submit --working-dir .``; again if the node's job agent or the dashboard wasn't up yet.

    The dashboard answering ``job list`` once does not mean it takes the next
    request: on a loaded machine a submit right after it was once refused.
    """
    for attempt in range(1, SUBMIT_ATTEMPTS + 1):
        result = cluster.ray("job", "submit", "--address", cluster.dashboard, "--submission-id", job_id,
                             "--working-dir", ".", "--no-wait", "--", *entrypoint)
        said = result.stdout + result.stderr
        if result.returncode == 0:
            return
        not_up = "No available agent" in said or "Failed to connect to Ray at address" in said
        if not not_up or attempt == SUBMIT_ATTEMPTS:
            pytest.fail(f"ray job submit failed:\n{said[-3000:]}")
        time.sleep(SUBMIT_RETRY_S)


def _wait_for_json(cluster: LocalCluster, job_id: str, path: Path, deadline: float):
    """What the learner wrote to ``path`` (endpoints.json, directory.json); it replaces them whole."""
    while True:
        if path.exists():
            return json.loads(path.read_text())
        status = cluster.job_status(job_id)
        if status in FINAL_STATUSES or time.monotonic() > deadline:
            pytest.fail(f"job {job_id} is {status} and never wrote {path.name}:\n{cluster.job_logs(job_id)}")
        time.sleep(POLL_S)


def _wait_for_end(cluster: LocalCluster, job_id: str, deadline: float) -> str:
    while True:
        status = cluster.job_status(job_id)
        if status in FINAL_STATUSES:
            return status
        if time.monotonic() > deadline:
            cluster.ray("job", "stop", "--address", cluster.dashboard, job_id)
            pytest.fail(f"job {job_id} still {status} after {JOB_TIMEOUT_S}s:\n{cluster.job_logs(job_id)}")
        time.sleep(POLL_S)


def test_submitted_learner_trains_clients_outside_the_cluster(local_cluster):
    output = local_cluster.temp_dir / "output"  # absolute: the job's cwd is its own copy of the repo
    job_id = f"rlinks-test-{os.getpid()}"
    deadline = time.monotonic() + JOB_TIMEOUT_S
    _submit(local_cluster, job_id,
            ["rlinks", "learner", "--config", CONFIG, "--port", "0", "--stop-reward", str(STOP_REWARD),
             "--stop-iters", str(STOP_ITERS), "--output", str(output)])

    endpoints = _wait_for_json(local_cluster, job_id, output / "endpoints.json", deadline)
    assert len(endpoints) == 2  # the config's num_env_runners
    assert all(e["host"] == "127.0.0.1" for e in endpoints)
    # The simulators are given the one address: the learner's directory.
    directory = _wait_for_json(local_cluster, job_id, output / "directory.json", deadline)
    commands = [dummy_client_cmd(directory["host"], directory["port"])] * (CLIENTS_PER_RUNNER * len(endpoints))
    with processes(commands) as clients:
        status = _wait_for_end(local_cluster, job_id, deadline)
        logs = local_cluster.job_logs(job_id)
        assert status == "SUCCEEDED", logs
        # The learner's last words reached every client: they end on their own.
        outputs = [client.communicate(timeout=CLI_TIMEOUT_S)[0] for client in clients]
    assert [c.returncode for c in clients] == [0] * len(clients), outputs
    assert all("summary: steps=" in out for out in outputs), outputs

    for entry in endpoints:
        assert f"runner {entry['worker_index']}: {entry['host']}:{entry['port']}" in logs
    assert "done: mean return" in logs
    rows = (output / "progress.csv").read_text().splitlines()
    assert 2 <= len(rows) <= STOP_ITERS + 1  # header + one row per iteration
    assert (output / "learning_curve.png").stat().st_size > 0
    assert (output / "checkpoint").is_dir()


def _run_script(env: dict) -> tuple[int | None, str]:
    """Run the walkthrough; ``(exit code or None if it had to be stopped, output)``.

    However this ends (its own bounds, ours, or pytest-timeout), the script
    gets a SIGTERM if it still runs: its own cleanup then stops its cluster.
    """
    script = subprocess.Popen(["bash", str(SCRIPT)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    out, stopped = "", False
    try:
        out, _ = script.communicate(timeout=HEAD_START_TIMEOUT_S + JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pass  # stopped below
    finally:
        if script.poll() is None:
            stopped = True
            script.send_signal(signal.SIGTERM)
            out, _ = script.communicate(timeout=HEAD_STOP_TIMEOUT_S + 2 * LEFTOVER_TIMEOUT_S)
    return (None if stopped else script.returncode), out


def test_walkthrough_script_runs_and_cleans_up():
    """examples/cluster/run_local_cluster.sh, as a reader would run it."""
    _need_job_submission()
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["JOB_TIMEOUT_S"] = str(JOB_TIMEOUT_S)
    code, out = _run_script(env)
    work = next((line.split()[3] for line in out.splitlines() if line.startswith("results and logs: ")), None)
    try:
        assert code == 0, out[-5000:]
        assert "SUCCEEDED" in out
        assert work is not None and (Path(work) / "output" / "learning_curve.png").exists()
        assert not _mentioning(work + "/"), "the script left processes of its cluster running"
    finally:
        if work is not None and work.startswith("/tmp/rlinks-cluster."):
            shutil.rmtree(work, ignore_errors=True)
