"""The network side's counters, and a limiter that keeps floods of rejections out of the log.

Both are written by the server's loop thread only (sessions and the listener).
"""

from __future__ import annotations

import collections
import logging
import time
from dataclasses import dataclass, field
from typing import Union

from ...protocol.errors import ErrorCode

__all__ = ["ServerStats", "LogLimiter"]

logger = logging.getLogger("rlinks_rllib.server")


class LogLimiter:
    """At most ``burst`` warnings per ``window_s`` seconds; then one line saying how many were left out.

    Counters (``ServerStats.errors``) still count every rejection; only the
    log lines are thinned.
    """

    def __init__(self, burst: int = 20, window_s: float = 10.0) -> None:
        self.burst, self.window_s = burst, window_s
        self._window_start = time.monotonic()
        self._logged = 0
        self.suppressed = 0

    def allow(self) -> bool:
        now = time.monotonic()
        if now - self._window_start >= self.window_s:
            if self.suppressed:
                logger.warning("rlinks: %d more rejected connections were not logged in the last %.0f s "
                               "(see the 'errors' counters)", self.suppressed, now - self._window_start)
            self._window_start, self._logged, self.suppressed = now, 0, 0
        if self._logged < self.burst:
            self._logged += 1
            return True
        self.suppressed += 1
        return False


@dataclass
class ServerStats:
    """Counters of the network side; written by the loop thread only."""

    connections_total: int = 0
    connections_refused: int = 0
    clients_connected: int = 0
    frames_in: int = 0
    frames_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    batches_in: int = 0
    steps_in: int = 0
    duplicates: int = 0
    #: Batches (and their env steps) handed to RLlib and confirmed to their client.
    batches_acked: int = 0
    steps_acked: int = 0
    #: Batches (and env steps) RLlib dropped after sample() returned them, taken in again.
    batches_handed_again: int = 0
    steps_handed_again: int = 0
    tls_handshakes_failed: int = 0
    accept_errors: int = 0
    #: Served actions: ACTs and their rows, actions sent, steps recorded, ACTs
    #: parked until new weights, envs closed for want of a report.
    served_acts: int = 0
    served_rows: int = 0
    served_actions: int = 0
    served_steps: int = 0
    served_parked: int = 0
    served_expired_envs: int = 0
    #: Forward passes for served actions, the rows and ACTs in them, and their time.
    inference_batches: int = 0
    inference_rows: int = 0
    inference_requests: int = 0
    inference_s: float = 0.0
    #: ERROR code (its wire spelling) -> connections closed with it.
    errors: collections.Counter = field(default_factory=collections.Counter)

    def count_error(self, code: Union[ErrorCode, str]) -> None:
        self.errors[str(code)] += 1

    def snapshot(self) -> dict:
        data = {k: v for k, v in self.__dict__.items() if k != "errors"}
        data["errors"] = dict(self.errors)
        data["errors_total"] = sum(self.errors.values())
        return data
