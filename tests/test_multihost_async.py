"""APPO with remote runners across the five hosts: runners on the workers, simulators through the directory.

The same harness as ``tests/test_multihost.py`` (``examples/cluster/netns_cluster.py``),
one training run with no faults: APPO's two runners placed on worker1 and
worker2 (a job submitted again while Ray puts both on one worker), four
reliable off-policy dummy simulators on sim1 and sim2 given only
``tls://HEAD:5555``, until a mean return of ``STOP_REWARD``. Deselected by
default (``-m multihost_async``, ``make test-multihost-async``): it costs a
cluster's start and a training run, a few minutes as root.

APPO samples asynchronously and its runners pull their weights from
RLlib's ``EnvRunnerStateServer`` (docs/CLUSTER.md, "APPO and IMPALA"):
the test checks that the simulators' weights move on and that every step
a simulator sent was confirmed by a runner on a worker.
"""

from __future__ import annotations

import json
import time

import pytest

from multihost import Training, nc, skip_reason, wait_for

REASON = skip_reason()
pytestmark = [
    pytest.mark.multihost_async,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(REASON is not None, reason=f"multi-host harness: {REASON}"),
]

SIMS_PER_HOST = 2
STOP_REWARD = 150
STOP_ITERS = 150
PLACEMENT_ATTEMPTS = 3


def _runners(output) -> dict[int, str]:
    return {e["worker_index"]: f"{e['host']}:{e['port']}" for e in json.loads((output / "endpoints.json").read_text())}


@pytest.fixture
def asked_for(request):
    """Runs only when its marker is selected (``-m multihost_async``): out of ``make test`` and ``-m multihost``."""
    if "multihost_async" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("APPO across five hosts runs with -m multihost_async (make test-multihost-async)")


def test_appo_with_runners_on_the_workers_reaches_the_stop_reward(asked_for, tmp_path_factory):
    with nc.five_hosts(tmp_path_factory.mktemp("hosts")) as cluster:
        run = Training(cluster, algorithm="APPO")
        workers = {cluster.net.hosts[w].address for w in nc.WORKERS}
        started = time.monotonic()
        try:
            for attempt in range(1, PLACEMENT_ATTEMPTS + 1):
                output = run.submit(stop_reward=STOP_REWARD, stop_iters=STOP_ITERS)
                wait_for(lambda: (output / "directory.json").exists(), 240, "directory.json from the learner")
                placed = {a.split(":")[0] for a in _runners(output).values()}
                if placed == workers or attempt == PLACEMENT_ATTEMPTS:
                    break
                cluster.ray.stop_job(run.job[0])  # Ray put both runners on one worker: place them again
                cluster.ray.wait_job(run.job[0], 120)
            assert placed == workers, _runners(output)
            listening = time.monotonic()
            run.start_simulators(SIMS_PER_HOST)
            status = cluster.ray.wait_job(run.job[0], 600)
            took = time.monotonic() - listening
            logs = cluster.ray.job_logs(run.job[0])
            assert status == "SUCCEEDED", logs[-4000:]
            assert run.best_return() >= STOP_REWARD, logs[-4000:]
            state = "; ".join(f"{s.name}: {s.progress}" for s in run.sims)
            assert all(int(s.progress.get("weights", 0)) > 10 for s in run.sims), state  # the weights moved on
            # Confirmed by runners on the workers (once the job ended, the simulators went back to the directory).
            on_workers = [any(r.split(":")[0] in workers and n > 0 for r, n in s.acked_on.items()) for s in run.sims]
            assert all(on_workers), state
            rows = run.rows()
            print(f"\n[multihost_async] APPO to a mean return of {run.best_return():.1f}: {took:.0f}s after the "
                  f"learner listened ({time.monotonic() - started:.0f}s with placement), {len(rows)} iterations, "
                  f"{run.trained()} env steps trained, {run.sent()} sent, {run.confirmed()} confirmed; "
                  f"runners {_runners(output)}; weights {[s.progress.get('weights') for s in run.sims]}")
        finally:
            for job_id, _ in run.jobs:
                (cluster.work / f"{job_id}.log").write_text(cluster.ray.job_logs(job_id))
