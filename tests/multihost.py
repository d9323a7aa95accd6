"""Pytest side of the five-host harness (``examples/cluster/netns_cluster.py``).

:func:`skip_reason` says in one line why a machine can't run it (not root,
no ``ip``, no ``ray job submit``); :class:`Training` is one training run
across the hosts with its books: env steps **sent** and **confirmed** by
every simulator (from their ``progress:`` lines) and **trained** (the
``env_steps_iter`` column of every ``progress.csv`` the learner's jobs
wrote, resumed jobs included).
"""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "cluster"))

import netns_cluster as nc  # noqa: E402  (an example script, not a package)

__all__ = ["nc", "skip_reason", "Training", "wait_for"]


def skip_reason() -> Optional[str]:
    """Why the multi-host tests can't run here (one line), or ``None``."""
    reason = nc.unavailable_reason()
    if reason:
        return reason
    if not (nc.BIN / "ray").exists() or shutil.which("rlinks", path=str(nc.BIN)) is None:
        return f"needs the ray and rlinks commands next to {sys.executable}"
    try:
        import aiohttp  # noqa: F401  (ray[default]: the job server)
    except ImportError:
        return "`ray job submit` needs ray[default] (the dashboard's job server)"
    if shutil.which("openssl") is None:
        return "the openssl command is needed to make the cluster's certificates"
    return None


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, poll: float = 0.25) -> float:
    """Seconds until ``predicate()`` held; AssertionError naming ``what`` after ``timeout``."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"no {what} within {timeout:g}s")
        time.sleep(poll)
    return time.monotonic() - started


@dataclass
class Training:
    """The learner's jobs (one output folder each) and the simulators, with their books."""

    cluster: nc.Cluster
    sims: list = field(default_factory=list)
    jobs: list = field(default_factory=list)  # (job id, output folder)
    #: One of ``nc.ALGORITHMS``: the learner's config, and whether the simulators run off-policy.
    algorithm: str = "PPO"

    def submit(self, *, stop_reward: float, stop_iters: int, resume: Optional[str] = None) -> Path:
        job_id = f"learner-{len(self.jobs) + 1}"
        output = self.cluster.work / job_id
        self.cluster.ray.submit(job_id, self.cluster.learner(output, stop_reward=stop_reward, stop_iters=stop_iters,
                                                             resume=resume, algorithm=self.algorithm))
        self.jobs.append((job_id, output))
        return output

    @property
    def job(self) -> tuple[str, Path]:
        return self.jobs[-1]

    def rows(self, job: Optional[int] = None) -> list[dict]:
        found = []
        for _, output in self.jobs if job is None else [self.jobs[job]]:
            path = output / "progress.csv"
            if path.exists():
                with open(path) as f:
                    found += list(csv.DictReader(f))
        return found

    def iterations(self) -> int:
        return len(self.rows())

    def trained(self) -> int:
        return sum(int(r["env_steps_iter"]) for r in self.rows())

    def best_return(self) -> float:
        returns = [float(r["episode_return_mean"]) for r in self.rows()]
        return max((r for r in returns if r == r), default=float("nan"))

    def sent(self) -> int:
        return sum(s.count("steps_sent") for s in self.sims)

    def confirmed(self) -> int:
        return sum(s.count("steps_acked") for s in self.sims)

    def books(self, timeout: float = 60, *, check: bool = True) -> dict:
        """Sent, confirmed and trained at a quiet moment, when every confirmed step is in a finished iteration.

        A runner confirms a batch when its ``sample()`` hands it to RLlib;
        the iteration's row is written once the training step is done. So
        confirmed == trained between an iteration's end and the next
        ``sample()`` (AssertionError if that moment never comes). After a
        fault some steps are trained twice (``check`` off): then the moment
        is one with confirmed <= trained, and the books are those read then;
        if it never comes, the books as they are after ``timeout`` (a loss,
        which the caller's assertion names). Books read at any other moment
        count the iteration in flight as confirmed and not trained: after a
        link cut under load that was 2,100 steps more than the steps trained
        twice, and read as a loss.
        """
        seen: dict = {}

        def quiet() -> bool:
            # Trained first: a step confirmed between the two reads can only make the books look worse.
            seen["trained"] = self.trained()
            seen["confirmed"] = self.confirmed()
            if check:
                return seen["confirmed"] == seen["trained"]
            return seen["confirmed"] <= seen["trained"]

        try:
            wait_for(quiet, timeout, f"moment with confirmed {'==' if check else '<='} trained")
        except AssertionError as exc:
            if check:
                raise AssertionError(f"{exc} (last read: {seen})") from None
        books = {"sent": self.sent(), "confirmed": seen["confirmed"], "trained": seen["trained"]}
        assert books["confirmed"] <= books["sent"], books
        return books

    def start_simulators(self, per_host: int) -> list:
        """``per_host`` simulators on each simulator host, given the directory only (off-policy if the algorithm is)."""
        cluster = self.cluster
        self.sims = nc.start_simulators(cluster.net, cluster.procs, cluster.credentials, cluster.directory, per_host,
                                        algorithm=self.algorithm)
        return self.sims

    def on(self, address: str) -> list:
        """The simulators whose last progress line named a runner at ``address``."""
        return [s for s in self.sims if s.progress.get("runner", "").startswith(f"{address}:")]

    def wait_iterations(self, more: int, timeout: float) -> float:
        target = self.iterations() + more
        return wait_for(lambda: self.iterations() >= target, timeout, f"{more} more training iterations")

    def endpoints(self, host: str) -> subprocess.CompletedProcess:
        """``rlinks endpoints tls://DIRECTORY`` from simulator ``host``, with the CA and the secret."""
        creds = self.cluster.credentials
        return subprocess.run(self.cluster.net.argv(host, sys.executable, "-m", "rlinks_rllib", "endpoints",
                                                    f"tls://{self.cluster.directory}", "--ca-file", creds["ca"],
                                                    "--secret-file", creds["secret"]),
                              capture_output=True, text=True, timeout=60, cwd=ROOT,
                              env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})

    def probe(self, host: str, address: str) -> subprocess.CompletedProcess:
        """From simulator ``host``: connect to the runner at ``address`` directly and fetch its weights."""
        code = ("import sys; from rlinks_rllib.client import RLinkClient; "
                "c = RLinkClient(sys.argv[1], ca_file=sys.argv[2], secret_file=sys.argv[3], timeout=20, "
                "retry_attempts=2, connect_wait=0); print('weights', c.get_state().seq_no); c.close()")
        creds = self.cluster.credentials
        return subprocess.run(self.cluster.net.argv(host, sys.executable, "-c", code, f"tls://{address}",
                                                    creds["ca"], creds["secret"]),
                              capture_output=True, text=True, timeout=60, cwd=ROOT,
                              env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
