#!/usr/bin/env python3
"""Five hosts on one machine: a real multi-node Ray cluster, simulators on other hosts, links that fail.

    sudo .venv/bin/python examples/cluster/netns_cluster.py [--stop-reward 150]

Each host is a Linux network namespace with its own network stack and one
address in a private range (``10.213.N.0/24``, N picked per run), joined by
veth pairs to a bridge::

    head     10.213.N.1   ray start --head; the learner's job (and so the directory)
    worker1  10.213.N.2   ray start --address=head: one EnvRunner, listening on 0.0.0.0
    worker2  10.213.N.3   ray start --address=head: the other EnvRunner
    sim1     10.213.N.4   dummy simulators, given only the directory's address
    sim2     10.213.N.5   more of them

``rlinks learner`` goes in with ``ray job submit``. TLS and the shared
secret are on for every port (one CA, one secret, made per run), set up as
``docs/SECURITY.md`` tells users to. The script trains PPO on CartPole
(``--algorithm APPO``: APPO, its simulators off-policy) to the stop
reward, prints every simulator's steps sent and confirmed, and removes
everything it made: the processes it started (by process group,
then whatever is left inside its own namespaces), the namespaces and the
bridge. It never runs ``ray stop`` and never touches another Ray on the
machine (its Ray lives in its own namespaces, with its own temp dirs).

Needs root (network namespaces) and the ``ip`` command; ``tests/multihost.py``
builds the pytest fixtures of ``tests/test_multihost.py`` from the same
classes. Faults: :meth:`Network.cut` and :meth:`Network.mend` take a host's
link down and up; :meth:`RayCluster.kill_node` kills a node's Ray
processes; :class:`SlowLink` puts a userspace forwarder that delays every
frame between a host and the bridge.
"""

from __future__ import annotations

import argparse
import array
import contextlib
import heapq
import json
import os
import random
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional, Sequence

from rlinks_rllib.protocol.errors import RLinksError

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DUMMY_CLIENT = ROOT / "examples" / "dummy_cartpole_client.py"
HOSTS = ("head", "worker1", "worker2", "sim1", "sim2")
WORKERS = ("worker1", "worker2")
SIMULATOR_HOSTS = ("sim1", "sim2")
#: The private range; the third octet is picked per run among those no route of this machine uses.
SUBNET = "10.213"
GCS_PORT = 6379
DASHBOARD_PORT = 8265
#: The directory (the one address simulators get); runner i listens on BASE_PORT + i.
BASE_PORT = 5555
CPUS_PER_WORKER = 2
IP_TIMEOUT_S = 10
START_TIMEOUT_S = 180
STOP_TIMEOUT_S = 20
POLL_S = 1.0
FINAL_STATUSES = ("SUCCEEDED", "FAILED", "STOPPED")

# Ray's own timers: the GCS declares a node dead after HEALTH_FAILURES failed
# health checks, one every HEALTH_PERIOD_MS. A cut link fails them fast (no
# route to host, once ARP gives up), as a killed node does (refused), so the
# product is how long a node may be unreachable: Ray's default (5 x 3 s) loses
# a node cut off for 20 s; here it is 35 s, and a killed node is noticed after as long.
HEALTH_PERIOD_MS = 1000
HEALTH_TIMEOUT_MS = 5000
HEALTH_FAILURES = 35


class ClusterError(RLinksError):
    """The harness could not build, drive or remove its hosts or its cluster."""


def unavailable_reason() -> Optional[str]:
    """Why network namespaces can't be made here (one line), or ``None`` when they can."""
    if not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the 'ip' command (iproute2) is not installed"
    name = f"rkprobe{os.getpid() % 100000}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, timeout=IP_TIMEOUT_S)
    if made.returncode != 0:
        return f"'ip netns add' fails here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=IP_TIMEOUT_S)
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT_S)
    if check and done.returncode != 0:
        raise ClusterError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


# -- the hosts -------------------------------------------------------------------------------


@dataclass
class Host:
    name: str
    ns: str
    address: str
    #: The root namespace's end of the host's veth pair: down = the host is cut off.
    link: str


class Network:
    """The namespaces, their veth pairs and the bridge; :meth:`down` removes all of them.

    Names carry a per-run suffix (``rk<5 hex>``), so two runs, or a run and
    a crashed run's leftovers, never share a name.
    """

    def __init__(self, hosts: Sequence[str] = HOSTS) -> None:
        self.suffix = f"rk{random.randrange(16 ** 5):05x}"
        self.subnet = f"{SUBNET}.{self._free_octet()}"
        self.bridge = f"{self.suffix}br"
        self.gateway = f"{self.subnet}.254"  # the bridge's address in the root namespace
        self.hosts = {
            name: Host(name, f"{self.suffix}-{name}", f"{self.subnet}.{i + 1}", f"{self.suffix}h{i}")
            for i, name in enumerate(hosts)
        }
        self._made: list[tuple[str, ...]] = []  # what down() removes, newest first

    @staticmethod
    def _free_octet() -> int:
        routes = _ip("-4", "route", "show").stdout + _ip("-4", "addr", "show").stdout
        used = {int(m) for m in re.findall(rf"{re.escape(SUBNET)}\.(\d+)\.", routes)}
        free = [n for n in range(1, 255) if n not in used]
        if not free:
            raise ClusterError(f"every {SUBNET}.N.0/24 is in use on this machine")
        return random.choice(free)

    def up(self) -> "Network":
        """Make the bridge, then each host; on any failure remove what was made and raise ClusterError."""
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self._made.append(("link", "del", self.bridge))
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for host in self.hosts.values():
                self._add_host(host)
        except BaseException:
            self.down()
            raise
        return self

    def _add_host(self, host: Host) -> None:
        _ip("netns", "add", host.ns)
        self._made.append(("netns", "del", host.ns))
        inside = f"{host.link}x"
        _ip("link", "add", host.link, "type", "veth", "peer", "name", inside)
        self._made.append(("link", "del", host.link))
        _ip("link", "set", inside, "netns", host.ns)
        _ip("link", "set", host.link, "master", self.bridge, "up")
        _ip("-n", host.ns, "addr", "add", f"{host.address}/24", "dev", inside)
        # No segmentation offload: every frame a host sends is at most an MTU, as on a real wire,
        # so that SlowLink's forwarder (which can only pass whole frames) gets nothing larger.
        _ip("-n", host.ns, "link", "set", inside, "gso_max_size", "1500", "up")
        _ip("-n", host.ns, "link", "set", "lo", "up")

    def argv(self, host: str, *command: str) -> list[str]:
        """``command`` run inside ``host``'s namespace."""
        return ["ip", "netns", "exec", self.hosts[host].ns, *command]

    def cut(self, host: str) -> None:
        """Take ``host``'s link down: its packets go nowhere, no connection is told."""
        _ip("link", "set", self.hosts[host].link, "down")

    def mend(self, host: str) -> None:
        _ip("link", "set", self.hosts[host].link, "up")

    def pids(self, host: str) -> list[int]:
        """Every process inside ``host``'s namespace."""
        done = _ip("netns", "pids", self.hosts[host].ns, check=False)
        return [int(p) for p in done.stdout.split()]

    def kill_inside(self, host: str) -> int:
        """SIGKILL whatever runs inside ``host``'s namespace (ours by construction); how many."""
        found = self.pids(host)
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return len(found)

    def down(self) -> list[str]:
        """Kill what is left in our namespaces, then delete them and the bridge; the problems met."""
        problems = []
        for host in self.hosts.values():
            if any(step == ("netns", "del", host.ns) for step in self._made):
                self.kill_inside(host.name)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while any(self.pids(h.name) for h in self.hosts.values() if ("netns", "del", h.ns) in self._made):
            if time.monotonic() > deadline:
                problems.append("processes survive SIGKILL in the namespaces")
                break
            time.sleep(0.2)
        while self._made:
            step = self._made.pop()
            done = _ip(*step, check=False)
            if done.returncode != 0 and "Cannot find" not in done.stderr and "does not exist" not in done.stderr:
                problems.append(f"ip {' '.join(step)}: {done.stderr.strip()}")
        return problems


# -- processes -------------------------------------------------------------------------------


class Processes:
    """Processes this harness started, each in its own process group, and only those."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, argv: Sequence[str], env: dict, *, pipe: bool = False) -> subprocess.Popen:
        """Start ``argv`` in a new session; its output goes to ``<log_dir>/<name>.log`` (or a pipe)."""
        out = subprocess.PIPE if pipe else open(self.log_dir / f"{name}.log", "w")
        try:
            proc = subprocess.Popen(list(argv), env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, text=True)
        finally:
            if not pipe:
                out.close()
        self.procs[name] = proc
        return proc

    def signal(self, name: str, sig: int) -> None:
        proc = self.procs[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)

    def stop(self, name: str, grace_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM ``name``'s process group; SIGKILL it after ``grace_s``."""
        proc = self.procs.pop(name)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the group: children that outlived their parent too
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace_s)

    def stop_all(self, grace_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM every group at once, give them ``grace_s`` together, then SIGKILL every group."""
        names = list(self.procs)
        for name in names:
            if self.procs[name].poll() is None:
                self.signal(name, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for name in names:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.procs[name].wait(max(0.0, deadline - time.monotonic()))
        late = [name for name in names if self.procs[name].poll() is None]
        if late:
            print(f"netns_cluster: still running {grace_s:g} s after SIGTERM, killed: {', '.join(late)}",
                  file=sys.stderr, flush=True)
        for name in names:
            self.stop(name, grace_s=2)


# -- certificates, secret, config ------------------------------------------------------------


def make_credentials(directory: Path, addresses: Sequence[str]) -> dict[str, str]:
    """One CA, one server certificate naming every address, one secret: docs/SECURITY.md's recipe.

    Raises:
        subprocess.CalledProcessError: openssl failed.
    """
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=30)

    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj",
            "/CN=rlinks training CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    names = ",".join(f"IP:{a}" for a in addresses)
    (directory / "learner.ext").write_text(
        f"subjectAltName={names}\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n")
    openssl("req", *ec, "-keyout", "learner.key", "-out", "learner.csr", "-subj", "/CN=learner")
    openssl("x509", "-req", "-in", "learner.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "learner.pem", "-days", "2", "-extfile", "learner.ext")
    secret = directory / "secret"
    secret.write_text(os.urandom(32).hex() + "\n")
    for private in ("ca.key", "learner.key", "secret"):
        (directory / private).chmod(0o600)
    return {"ca": str(directory / "ca.pem"), "cert": str(directory / "learner.pem"),
            "key": str(directory / "learner.key"), "secret": str(secret)}


#: The algorithms the cluster trains: the config's ``training``/``model`` sections, and whether its
#: simulators run off-policy (``--off-policy``: batches sent whenever they have them).
ALGORITHMS = {
    "PPO": ("""\
training:
  lr: 0.0005
  train_batch_size_per_learner: 2000
  minibatch_size: 250
  num_epochs: 6
  gamma: 0.99
  vf_loss_coeff: 0.01
model:
  fcnet_hiddens: [64, 64]
  fcnet_activation: tanh
""", False),
    # configs/appo_cartpole.yaml's settings; its learner is local (num_learners: 0 below) as PPO's is.
    "APPO": ("""\
training:
  lr: 0.0005
  vf_loss_coeff: 0.05
  entropy_coeff: 0.0
  train_batch_size_per_learner: 500
  grad_clip: 40.0
model:
  fcnet_hiddens: [64, 64]
  vf_share_layers: true
""", True),
}


def write_learner_config(path: Path, credentials: dict[str, str], *, stop_reward: float, stop_iters: int,
                         algorithm: str = "PPO") -> Path:
    """``algorithm`` (one of :data:`ALGORITHMS`) on CartPole, runners on every interface, TLS and the secret on
    every port, runners restarted."""
    training, off_policy = ALGORITHMS[algorithm]
    fragment = "  rollout_fragment_length: 50\n" if off_policy else ""
    path.write_text(f"""\
# Written by examples/cluster/netns_cluster.py for one run.
description: {algorithm} on CartPole-v1 across five hosts, TLS and auth on every port
algorithm: {algorithm}
spaces:
  from_env: CartPole-v1
{training}env_runners:
  num_env_runners: 2
  sample_timeout_s: 10
{fragment}learners:
  num_learners: 0
fault_tolerance:
  restart_failed_env_runners: true
  env_runner_health_probe_timeout_s: 10
rlinks:
  host: 0.0.0.0
  port: {BASE_PORT}
  auth: "on"
  auth_secret_file: {credentials['secret']}
  tls_cert_file: {credentials['cert']}
  tls_key_file: {credentials['key']}
stop:
  reward: {stop_reward}
  iters: {stop_iters}
""")
    return path


# -- Ray ---------------------------------------------------------------------------------------


class RayCluster:
    """``ray start --head`` on the head host, ``ray start --address`` on each worker, each with its own temp dir."""

    def __init__(self, net: Network, procs: Processes, work: Path) -> None:
        self.net = net
        self.procs = procs
        self.work = work
        self.head = net.hosts["head"].address
        self.dashboard = f"http://{self.head}:{DASHBOARD_PORT}"
        token = work / "ray_token"
        token.write_text(os.urandom(32).hex())
        token.chmod(0o600)
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_AUTH_TOKEN")}
        self.env.update(
            # The jobs run with this environment: our rlinks first, our code first.
            PATH=f"{BIN}{os.pathsep}{self.env.get('PATH', '')}",
            PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [self.env.get("PYTHONPATH")])]),
            PYTHONUNBUFFERED="1",
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN_PATH=str(token),
            RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="5",
            RAY_health_check_period_ms=str(HEALTH_PERIOD_MS),
            RAY_health_check_timeout_ms=str(HEALTH_TIMEOUT_MS),
            RAY_health_check_failure_threshold=str(HEALTH_FAILURES),
            RAY_USAGE_STATS_ENABLED="0",
            # Actors placed by the GCS rather than by raylets deciding from the same stale view:
            # the two runners usually land on the two workers (not always: check endpoints.json).
            RAY_gcs_actor_scheduling_enabled="true",
            # `ray job stop` sends SIGTERM; the learner finishes its iteration and checkpoints first.
            RAY_JOB_STOP_WAIT_TIME_S="90",
        )

    def _temp_dir(self, host: str) -> str:
        # Short: Ray's Unix sockets live under it (108-byte paths).
        path = Path(f"/tmp/{self.net.suffix}-{host}")
        path.mkdir(exist_ok=True)
        return str(path)

    def start(self) -> "RayCluster":
        self.procs.start("ray-head", self.net.argv(
            "head", str(BIN / "ray"), "start", "--head", "--block", "--disable-usage-stats",
            "--node-ip-address", self.head, "--port", str(GCS_PORT), "--num-cpus", "0",
            "--temp-dir", self._temp_dir("head"), "--include-dashboard", "true",
            "--dashboard-host", "0.0.0.0", "--dashboard-port", str(DASHBOARD_PORT)), self.env)
        self._wait(lambda: self.ray("job", "list", "--address", self.dashboard).returncode == 0,
                   "the head's job server to answer", "ray-head")
        for worker in WORKERS:
            self.start_worker(worker)
        self._wait(lambda: self.alive_nodes() == 1 + len(WORKERS), "both workers to join", "ray-head")
        return self

    def start_worker(self, worker: str) -> None:
        self.procs.start(f"ray-{worker}", self.net.argv(
            worker, str(BIN / "ray"), "start", "--address", f"{self.head}:{GCS_PORT}", "--block",
            "--disable-usage-stats", "--node-ip-address", self.net.hosts[worker].address,
            "--num-cpus", str(CPUS_PER_WORKER), "--temp-dir", self._temp_dir(worker)), self.env)

    def kill_node(self, worker: str) -> int:
        """SIGKILL every Ray process of ``worker`` (its ``ray start`` group and all else in its namespace)."""
        self.procs.signal(f"ray-{worker}", signal.SIGKILL)
        self.procs.stop(f"ray-{worker}", grace_s=2)
        return self.net.kill_inside(worker)

    def _wait(self, ready, what: str, proc: str, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if self.procs.procs[proc].poll() is not None:
                raise ClusterError(f"{proc} exited while waiting for {what}: {self.log_tail(proc)}")
            if time.monotonic() > deadline:
                raise ClusterError(f"no {what} within {timeout:g}s: {self.log_tail(proc)}")
            time.sleep(POLL_S)

    def log_tail(self, name: str, chars: int = 3000) -> str:
        path = self.procs.log_dir / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def ray(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """The ``ray`` CLI, run on the head host."""
        return subprocess.run(self.net.argv("head", str(BIN / "ray"), *args), cwd=ROOT, env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def _api(self, path: str, method: str = "GET", timeout: float = 30) -> Optional[dict]:
        """The dashboard's REST API from the root namespace (through the bridge); ``None`` if it did not answer."""
        token = Path(self.env["RAY_AUTH_TOKEN_PATH"]).read_text().strip()
        request = urllib.request.Request(f"{self.dashboard}{path}", method=method,
                                         headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.load(response)
        except (OSError, ValueError):
            return None

    def alive_nodes(self) -> int:
        found = self._api("/nodes?view=summary")
        if not found:
            return 0
        summary = found.get("data", {}).get("summary", [])
        return sum(1 for node in summary if node.get("raylet", {}).get("state") == "ALIVE")

    def submit(self, job_id: str, entrypoint: Sequence[str], attempts: int = 3) -> None:
        """``ray job submit --no-wait``; again when the head's job agent was not up yet."""
        for attempt in range(1, attempts + 1):
            done = self.ray("job", "submit", "--address", self.dashboard, "--submission-id", job_id,
                            "--no-wait", "--", *entrypoint)
            if done.returncode == 0:
                return
            if "No available agent" not in done.stdout + done.stderr or attempt == attempts:
                raise ClusterError(f"ray job submit failed: {(done.stdout + done.stderr)[-3000:]}")
            time.sleep(5)

    def job_status(self, job_id: str) -> str:
        found = self._api(f"/api/jobs/{job_id}")
        return found["status"] if found else "UNREACHABLE"

    def stop_job(self, job_id: str) -> None:
        """Ask the job to stop (SIGTERM to the learner, which finishes its iteration); :meth:`wait_job` for the end."""
        self.ray("job", "stop", "--address", self.dashboard, "--no-wait", job_id)

    def job_logs(self, job_id: str) -> str:
        done = self.ray("job", "logs", "--address", self.dashboard, job_id)
        return done.stdout + done.stderr

    def wait_job(self, job_id: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while (status := self.job_status(job_id)) not in FINAL_STATUSES:
            if time.monotonic() > deadline:
                return status
            time.sleep(POLL_S)
        return status


# -- simulators --------------------------------------------------------------------------------


@dataclass
class Simulator:
    """One dummy client process and what its ``progress:`` lines said last."""

    name: str
    host: str
    proc: subprocess.Popen
    progress: dict = field(default_factory=dict)
    summary: str = ""
    tail: list = field(default_factory=list)
    #: runner -> the highest ``steps_acked`` seen while connected to it (the line says where it is now).
    acked_on: dict = field(default_factory=dict)
    #: Where every line goes as well, with the time it was read.
    log: Optional[Path] = None

    def read(self) -> None:
        assert self.proc.stdout is not None
        with open(self.log, "w", buffering=1) if self.log is not None else contextlib.nullcontext() as log:
            for line in self.proc.stdout:
                line = line.rstrip()
                if log is not None:
                    log.write(f"{time.strftime('%H:%M:%S')} {line}\n")
                self._take(line)

    def _take(self, line: str) -> None:
        if line.startswith("progress: "):
            self.progress = dict(item.split("=", 1) for item in line[len("progress: "):].split())
            runner = self.progress.get("runner", "?")
            self.acked_on[runner] = max(self.acked_on.get(runner, 0), self.count("steps_acked"))
        elif line.startswith("summary: "):
            self.summary = line
        self.tail.append(line)
        del self.tail[:-30]

    def count(self, key: str) -> int:
        return int(self.progress.get(key, 0))


def start_simulators(net: Network, procs: Processes, credentials: dict[str, str], directory: str,
                     per_host: int, *, timeout_s: float = 60, algorithm: str = "PPO") -> list[Simulator]:
    """``per_host`` reliable dummy clients on each simulator host, given ``tls://directory`` only.

    Off-policy (``--off-policy``) where ``algorithm`` is (see :data:`ALGORITHMS`).
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    env.pop("RLINKS_SECRET", None)
    sims = []
    for host in SIMULATOR_HOSTS:
        for i in range(per_host):
            name = f"{host}-{i}"
            argv = net.argv(host, sys.executable, "-u", str(DUMMY_CLIENT), "--address", f"tls://{directory}",
                            "--ca-file", credentials["ca"], "--secret-file", credentials["secret"], "--reliable",
                            "--timeout", str(timeout_s), "--retry-attempts", "60", "--max-steps", "100000000",
                            "--report-every", "0.5", *(["--off-policy"] if ALGORITHMS[algorithm][1] else []))
            sim = Simulator(name, host, procs.start(f"sim-{name}", argv, env, pipe=True),
                            log=procs.log_dir / f"sim-{name}.log")
            threading.Thread(target=sim.read, name=f"read-{name}", daemon=True).start()
            sims.append(sim)
    return sims


# -- a slow link -------------------------------------------------------------------------------


class SlowLink:
    """A host's link through a userspace forwarder of ours that holds every frame ``delay_s``.

    The host's veth is taken off the bridge; a second veth pair joins the
    bridge instead; a thread per direction reads whole Ethernet frames from
    one root-side end (``AF_PACKET``) and writes them to the other once
    ``delay_s`` has passed. Both directions are delayed, so a round trip
    takes ``2 * delay_s`` more. A frame larger than the MTU could not be
    written to the other end, so every host's own end sends none
    (``Network`` limits its ``gso_max_size``), and offloads are switched
    off on the forwarder's ends too.
    """

    def __init__(self, net: Network, host: str, delay_s: float) -> None:
        self.net = net
        self.host = net.hosts[host]
        self.delay_s = delay_s
        self.near = f"{self.host.link}s"  # on the bridge
        self.far = f"{self.host.link}t"  # the forwarder's end of that pair
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        self.frames = 0

    def __enter__(self) -> "SlowLink":
        _ip("link", "add", self.near, "type", "veth", "peer", "name", self.far)
        self.net._made.append(("link", "del", self.near))
        _ip("link", "set", self.near, "master", self.net.bridge, "up")
        _ip("link", "set", self.far, "up", "promisc", "on")
        _ip("link", "set", self.host.link, "nomaster")
        _ip("link", "set", self.host.link, "up", "promisc", "on")
        for link in (self.far, self.host.link):
            _ip("link", "set", link, "gso_max_size", "1500", check=False)
            _ip("link", "set", link, "gro_max_size", "1500", check=False)
        a, b = self._bind(self.host.link), self._bind(self.far)
        for src, dst in ((a, b), (b, a)):
            thread = threading.Thread(target=self._forward, args=(src, dst), daemon=True, name="slow-link")
            thread.start()
            self._threads.append(thread)
        return self

    def _bind(self, link: str) -> socket.socket:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))  # ETH_P_ALL
        sock.bind((link, 0))
        self._socks.append(sock)
        return sock

    def _forward(self, src: socket.socket, dst: socket.socket) -> None:
        queue: list[tuple[float, int, bytes]] = []
        n = 0
        while not self._stop.is_set():
            wait = max(0.0, queue[0][0] - time.monotonic()) if queue else 0.1
            readable, _, _ = select.select([src], [], [], min(wait, 0.1))
            if readable:
                frame, address = src.recvfrom(65536)
                if address[2] != socket.PACKET_OUTGOING:
                    n += 1
                    heapq.heappush(queue, (time.monotonic() + self.delay_s, n, frame))
            while queue and queue[0][0] <= time.monotonic():
                _, _, frame = heapq.heappop(queue)
                with contextlib.suppress(OSError):  # a frame too large or a link going down: a lost frame
                    dst.send(_with_checksum(frame))
                    self.frames += 1

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        for sock in self._socks:
            sock.close()
        _ip("link", "set", self.host.link, "promisc", "off", check=False)
        _ip("link", "set", self.host.link, "master", self.net.bridge, check=False)
        _ip("link", "del", self.near, check=False)


def _with_checksum(frame: bytes) -> bytes:
    """``frame`` with its IPv4 TCP or UDP checksum computed.

    A veth leaves that checksum to "the hardware" (checksum offload), so a
    frame read off one arrives unfinished; the kernel that receives it
    from our packet socket would drop it.
    """
    if len(frame) < 34 or frame[12:14] != b"\x08\x00" or frame[23] not in (6, 17):
        return frame
    start = 14 + (frame[14] & 0x0F) * 4
    end = 14 + int.from_bytes(frame[16:18], "big")
    field_at = start + (16 if frame[23] == 6 else 6)
    out = bytearray(frame)
    out[field_at:field_at + 2] = b"\0\0"
    data = frame[26:34] + bytes([0, frame[23]]) + (end - start).to_bytes(2, "big") + bytes(out[start:end])
    if len(data) % 2:
        data += b"\0"
    total = sum(array.array("H", data))  # RFC 1071: the same in either byte order, if stored in it
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    checksum = ~total & 0xFFFF or 0xFFFF
    out[field_at:field_at + 2] = array.array("H", [checksum]).tobytes()
    return bytes(out)


# -- everything together -------------------------------------------------------------------------


@dataclass
class Cluster:
    """Five hosts, a Ray cluster on three of them, credentials; made by :func:`five_hosts`."""

    net: Network
    procs: Processes
    ray: RayCluster
    work: Path
    credentials: dict[str, str]

    @property
    def directory(self) -> str:
        """The one address simulators get: the directory on the head host's base port."""
        return f"{self.net.hosts['head'].address}:{BASE_PORT}"

    def learner(self, output: Path, *, stop_reward: float, stop_iters: int, resume: Optional[str] = None,
                checkpoint_every: int = 1, algorithm: str = "PPO") -> list[str]:
        """The ``rlinks learner`` entrypoint for a job."""
        config = write_learner_config(self.work / "learner.yaml", self.credentials, stop_reward=stop_reward,
                                      stop_iters=stop_iters, algorithm=algorithm)
        argv = ["rlinks", "learner", "--config", str(config), "--output", str(output),
                "--checkpoint-every", str(checkpoint_every)]
        return argv + (["--resume", resume] if resume else [])


@contextlib.contextmanager
def five_hosts(work: Optional[Path] = None) -> Iterator[Cluster]:
    """The five hosts and a Ray cluster on them; everything is removed on the way out, however it ends."""
    reason = unavailable_reason()
    if reason:
        raise ClusterError(reason)
    work = work or Path(tempfile.mkdtemp(prefix="rlinks-netns-"))
    work.chmod(0o755)
    net = Network()
    procs = Processes(work)
    try:
        net.up()
        credentials = make_credentials(work, [h.address for h in net.hosts.values()])
        ray = RayCluster(net, procs, work).start()
        yield Cluster(net, procs, ray, work, credentials)
    finally:
        procs.stop_all()
        problems = net.down()
        for host in net.hosts:
            shutil.rmtree(f"/tmp/{net.suffix}-{host}", ignore_errors=True)
        if problems:
            raise ClusterError("; ".join(problems))


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stop-reward", type=float, default=150)
    parser.add_argument("--stop-iters", type=int, default=40)
    parser.add_argument("--sims-per-host", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600, help="seconds the job may take")
    parser.add_argument("--algorithm", choices=sorted(ALGORITHMS), default="PPO")
    args = parser.parse_args(argv)
    reason = unavailable_reason()
    if reason:
        print(f"netns_cluster: {reason}", file=sys.stderr)
        return 1
    with five_hosts() as cluster:
        print(f"hosts: {', '.join(f'{h.name} {h.address}' for h in cluster.net.hosts.values())}; "
              f"logs in {cluster.work}")
        output = cluster.work / "output"
        cluster.ray.submit("learner", cluster.learner(output, stop_reward=args.stop_reward,
                                                      stop_iters=args.stop_iters, algorithm=args.algorithm))
        sims = start_simulators(cluster.net, cluster.procs, cluster.credentials, cluster.directory,
                                args.sims_per_host, algorithm=args.algorithm)
        print(f"simulators on {', '.join(SIMULATOR_HOSTS)} given tls://{cluster.directory} only")
        status = cluster.ray.wait_job("learner", args.timeout)
        print(cluster.ray.job_logs("learner")[-4000:])
        for sim in sims:
            print(f"{sim.name}: sent {sim.count('steps_sent')} confirmed {sim.count('steps_acked')} "
                  f"via {sim.progress.get('runner', '?')}")
        print(f"job {status}; results in {output}")
        return 0 if status == "SUCCEEDED" else 1


if __name__ == "__main__":
    sys.exit(main())
