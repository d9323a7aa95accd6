"""A training loop killed at any moment loses no sample its actor was told was delivered (issue #31).

One actor (this process, reliable as by default) puts samples to a loop in
another process (``tests/dataset_loop.py``), which records every sample it
trains on before it asks for the next batch. The loop is killed with
SIGKILL three times, at three moments, and a new one starts on the same
port each time:

* inside its training step (the first batch handed over, nothing confirmed);
* inside a partial batch (one batch done, six samples waiting for the rest
  of the next; confirmed: the actor's messages that lay wholly in the first);
* between batches (everything done and confirmed, the loop waiting).

The actor goes on putting, reconnects by itself and sends again what was
not confirmed. At the end every sample the actor put was recorded by some
loop (a confirmed sample that was lost would be missing: it is never sent
again), none twice by one loop, and at each kill what the actor had been
told was confirmed was already recorded. Over TCP, TLS and WebSocket.
Counts only; no time is asserted.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from rlinks_rllib.client.actor import RLinkActor

ROOT = Path(__file__).resolve().parents[1]
LOOP = ROOT / "tests" / "dataset_loop.py"
BATCH = 8
#: Seconds one wait for a loop's line (its start includes importing torch) or a confirmation may take.
WAIT_S = 60.0


class Loop:
    """One loop process, its printed lines, and the samples it recorded."""

    def __init__(self, port: int, record: Path, **options: object) -> None:
        self.record = record
        flags = [f"--{name.replace('_', '-')}={value}" for name, value in options.items()]
        self.proc = subprocess.Popen([sys.executable, "-u", str(LOOP), f"--port={port}", f"--record={record}",
                                      f"--batch-size={BATCH}", *flags], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        self.lines: queue.Queue = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, wanted: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not any(line.startswith(wanted) for line in self.seen):
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None and self.lines.empty():
                raise AssertionError(f"the loop did not print {wanted!r}; it printed: {self.seen[-20:]}")
            try:
                self.seen.append(self.lines.get(timeout=min(left, 1.0)))
            except queue.Empty:
                continue

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def recorded(self) -> list[int]:
        if not self.record.exists():
            return []
        return [int(line.split()[1]) for line in self.record.read_text().splitlines()]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(params=["tcp", "tls", "ws"])
def scheme(request) -> str:
    return request.param


@pytest.fixture
def tls(scheme, request) -> dict:
    """The loop's TLS files and the actor's options, for ``tls``; nothing otherwise."""
    if scheme != "tls":
        return {"loop": {}, "actor": {}, "host": "127.0.0.1"}
    certs = request.getfixturevalue("certs")
    return {"loop": {"tls_cert": certs["server"], "tls_key": certs["server_key"]}, "actor": {"ca_file": certs["ca"]},
            "host": "localhost"}


def test_a_loop_killed_anywhere_loses_no_confirmed_sample(scheme, tls, tmp_path):
    port = _free_port()
    loops: list[Loop] = []
    put = 0

    def put_up_to(actor: RLinkActor, end: int) -> None:
        nonlocal put
        for index in range(put, end):
            actor.put({"obs": np.full(4, index, np.float32), "actor": 0, "index": index})
        put = end

    def start(**options: float) -> Loop:
        loop = Loop(port, tmp_path / f"loop{len(loops)}.txt", **options, **tls["loop"])
        loops.append(loop)
        loop.wait_for("LISTENING")
        return loop

    def recorded() -> set[int]:
        return {index for loop in loops for index in loop.recorded()}

    def check_confirmed_were_recorded(actor: RLinkActor) -> int:
        confirmed = actor.confirmed  # the first `confirmed` samples, in the order put
        missing = set(range(confirmed)) - recorded()
        assert not missing, f"confirmed to the actor and recorded by no loop: {sorted(missing)}"
        return confirmed

    try:
        first = start(step_s=600)
        actor = RLinkActor(f"{scheme}://{tls['host']}:{port}", timeout=WAIT_S, backoff_initial=0.05, backoff_cap=0.5,
                           **tls["actor"])
        try:
            # 1. Inside the training step of the first batch: nothing may be confirmed yet.
            put_up_to(actor, 12)
            first.wait_for("STEP 0")
            assert check_confirmed_were_recorded(actor) == 0
            first.kill()

            # 2. Inside a partial batch: the second loop gets the 12 again and 2 more, trains on 8, holds 6
            #    (confirmed: the messages wholly inside those 8).
            second = start()
            put_up_to(actor, 14)
            second.wait_for("DONE 0")
            check_confirmed_were_recorded(actor)
            second.kill()

            # 3. Between batches: the third loop gets what is unconfirmed and 2 more; the actor's flush
            #    hands the partial batch on; the loop asks for the next one (confirming all) and waits.
            third = start()
            put_up_to(actor, 16)
            actor.flush()
            third.wait_for("DONE")
            assert check_confirmed_were_recorded(actor) == put
            third.kill()

            # The last loop ends the stream the same way.
            last = start(partial_after=60)
            put_up_to(actor, 26)
            actor.flush()
            assert check_confirmed_were_recorded(actor) == put
            assert actor.client.stats.reconnects >= 3
        finally:
            actor.close(flush=False)
        last.kill()
        assert recorded() == set(range(put)), "a sample put never reached a loop"
        for loop in loops:
            assert len(loop.recorded()) == len(set(loop.recorded())), "a loop kept a sample twice"
        assert len(first.recorded()) == 0 and len(second.recorded()) == BATCH
    finally:
        for loop in loops:
            loop.kill()
