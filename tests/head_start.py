"""Long training runs that start when collection ends and run beside the rest of the suite.

The suite leaves about half of its two cores idle: its tests wait on
sockets, subprocesses, Ray's start and cut links (busy 0.51 of both cores
over a whole run, from ``/proc/stat`` around each test). SAC's run to the
issue's -400 needs one core for some three minutes, which the suite can't
add in a row within its 25 minutes, and DQN's run to 150 takes 33 to 230 s
by luck (its return rises, falls back and rises again). A test marked
``head_start(run, bound_s=...)`` has ``run(tmp_path, cancelled)`` started
as soon as the session knows it will run that test; the test takes what
``run`` returned from the ``head_start`` fixture, which waits for it.

The runs go one at a time, in the order of their tests, on one thread: the
suite has about one idle core, not two. A run is its test's: what it raises
fails that test, not the session. A run still going ``bound_s`` after it
started is cancelled, and so is every run when the session ends first
(Ctrl-C, ``-x``): ``cancelled`` is set, and the run must then stop what it
started.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

#: A head start's work: ``run(tmp_path, cancelled)``; it must stop what it started once ``cancelled`` is set.
Run = Callable[[Path, threading.Event], Any]

#: How long a cancelled run may take to stop what it started.
CANCEL_S = 150.0


class HeadStart:
    """One run; :meth:`result` waits for it and gives what it returned or raised."""

    def __init__(self, name: str, run: Run, tmp_path: Path, bound_s: float) -> None:
        self.name, self.bound_s = name, bound_s
        self.cancelled = threading.Event()
        self._run, self._tmp_path = run, tmp_path
        self._returned: Any = None
        self._raised: BaseException | None = None
        self._started = threading.Event()
        self._done = threading.Event()
        self._started_at = 0.0

    def execute(self) -> None:
        """Run it here (on the queue's thread), unless it was cancelled first."""
        self._started_at = time.monotonic()
        self._started.set()
        try:
            if self.cancelled.is_set():
                raise RuntimeError(f"{self.name}: cancelled before it started")
            self._returned = self._run(self._tmp_path, self.cancelled)
        except BaseException as exc:  # handed to the test that waits for it, which raises it
            self._raised = exc
        finally:
            self._done.set()

    def result(self, wait_to_start_s: float) -> Any:
        """What the run returned; what it raised is raised here.

        Waits up to ``wait_to_start_s`` for the runs before it to end, then
        until ``bound_s`` after it started.

        Raises:
            AssertionError: it never started, or was still going ``bound_s``
                after it started (it is cancelled).
        """
        if not self._started.wait(wait_to_start_s):
            self.cancel()
            raise AssertionError(f"{self.name}: not started {wait_to_start_s:.0f} s after its test began")
        if not self._done.wait(max(0.0, self._started_at + self.bound_s - time.monotonic())):
            self.cancel()
            raise AssertionError(f"{self.name}: still running {self.bound_s:.0f} s after it started")
        if self._raised is not None:
            raise self._raised
        return self._returned

    def cancel(self) -> None:
        """Tell the run to stop and wait (bounded) until it has, if it is running."""
        self.cancelled.set()
        if self._started.is_set():
            self._done.wait(CANCEL_S)


class HeadStarts:
    """The session's runs, executed one after another on one daemon thread."""

    def __init__(self) -> None:
        self.runs: dict[str, HeadStart] = {}
        self._thread: threading.Thread | None = None

    def start(self, runs: list[HeadStart]) -> None:
        self.runs.update((run.name, run) for run in runs)
        self._thread = threading.Thread(target=lambda: [run.execute() for run in runs], name="head starts",
                                        daemon=True)
        self._thread.start()

    def waiting_before(self, name: str) -> float:
        """The longest the runs queued before ``name`` may take (their bounds)."""
        before = 0.0
        for other in self.runs.values():
            if other.name == name:
                return before
            before += other.bound_s
        return before

    def cancel_all(self) -> None:
        for run in self.runs.values():
            run.cancel()


_KEY = pytest.StashKey[HeadStarts]()


def start_head_starts(session: pytest.Session) -> None:
    """Start, in order, the runs of the collected tests marked ``head_start`` that are not skipped."""
    queue = session.config.stash.setdefault(_KEY, HeadStarts())
    if session.config.option.collectonly:
        return
    runs = []
    for item in session.items:
        marker = item.get_closest_marker("head_start")
        if marker is None or item.get_closest_marker("skip") is not None:
            continue
        # The session's own tmp_path factory (what the tmp_path fixture uses), before any test runs.
        tmp_path = session.config._tmp_path_factory.mktemp(f"head-start-{item.name[:40]}")
        runs.append(HeadStart(item.nodeid, marker.args[0], tmp_path, marker.kwargs["bound_s"]))
    if runs:
        queue.start(runs)


def cancel_head_starts(config: pytest.Config) -> None:
    """Cancel the runs still going or queued when the session ends (their tests did not run, or failed early)."""
    queue = config.stash.get(_KEY, None)
    if queue is not None:
        queue.cancel_all()


@pytest.fixture
def head_start(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """What the test's ``head_start`` run returned; run here and now if the session did not queue it."""
    marker = request.node.get_closest_marker("head_start")
    assert marker is not None, "the head_start fixture is for tests marked head_start(run, bound_s=...)"
    queue = request.config.stash.setdefault(_KEY, HeadStarts())
    run = queue.runs.get(request.node.nodeid)
    if run is None:
        run = HeadStart(request.node.nodeid, marker.args[0], tmp_path, marker.kwargs["bound_s"])
        run.execute()
        return run.result(0.0)
    return run.result(queue.waiting_before(run.name))
