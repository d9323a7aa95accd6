"""When the client tries again, and how long it waits first.

Two things only: :func:`backoff_delay`, exponential backoff with full jitter,
and :class:`RetryPolicy`, which says how many attempts a connection gets and
which failures deserve another one. Network failures do (a refused or reset
connection, a learner that closed on us, ``ERROR shutting_down`` from a
learner that is restarting); failures that would fail the same way again do
not: a wrong secret, an untrusted certificate, bytes that are not RLlink, a
server that stopped answering, any other ``ERROR``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ..protocol.errors import ErrorCode
from .errors import ClientError, ConnectionLost, ServerError

__all__ = ["backoff_delay", "RetryPolicy"]


def backoff_delay(failures: int, initial: float, cap: float, rng: random.Random) -> float:
    """Seconds to wait after ``failures`` failed attempts (0 for the first failure).

    Exponential backoff with full jitter: uniform in ``[0, min(cap,
    initial * 2**failures)]``, so many clients of a restarted learner don't
    all come back at the same instant.
    """
    return rng.uniform(0.0, min(cap, initial * 2.0 ** min(failures, 64)))


@dataclass
class RetryPolicy:
    """How often to try, how long to wait in between, and what is worth trying again.

    Attributes:
        attempts: connection attempts per connect, and (reliable mode)
            reconnections per call.
        initial, cap: the backoff (seconds); see :func:`backoff_delay`.
        rng: the jitter's source (a test may seed it).
    """

    attempts: int
    initial: float
    cap: float
    rng: random.Random = field(default_factory=random.Random)

    def delay(self, failures: int) -> float:
        """Seconds to wait after ``failures`` failed attempts."""
        return backoff_delay(failures, self.initial, self.cap, self.rng)

    @staticmethod
    def retryable(exc: BaseException) -> bool:
        """Whether another attempt may succeed where ``exc`` ended this one.

        ``True`` for a lost connection, ``ERROR shutting_down`` and the
        ``OSError`` of a failed connect (refused, unreachable, DNS, timeout);
        ``False`` for every other client error: authentication, TLS
        certificates, protocol violations, timeouts waiting for a reply and
        the server's other ``ERROR`` codes.
        """
        if isinstance(exc, ServerError):
            return exc.code == ErrorCode.SHUTTING_DOWN.value
        if isinstance(exc, ClientError):
            return isinstance(exc, ConnectionLost)
        return isinstance(exc, OSError)
