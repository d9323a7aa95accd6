"""When the client tries again, and how long it waits first.

:func:`backoff_delay`, exponential backoff with full jitter, and
:class:`RetryPolicy`, which says how many attempts a connection gets, which
failures deserve another one, and how long a learner that said it was
stopping is waited for. Network failures deserve one (a refused or reset
connection, a learner that closed on us, ``ERROR shutting_down`` from a
learner that may be restarting); failures that would fail the same way again
do not: a wrong secret, an untrusted certificate, bytes that are not RLlink, a
server that stopped answering, any other ``ERROR``.

``shutting_down`` alone can't say whether the learner ended its run or is
being restarted (a job stopped and resubmitted, an ``Algorithm`` restored from
a checkpoint): both look the same from here, a learner that stops answering.
So after it a reliable client keeps trying for ``shutdown_grace`` seconds at
most (:data:`DEFAULT_SHUTDOWN_GRACE_S`, or ``$RLINKS_SHUTDOWN_GRACE_S``), long
enough for a learner restored in the same process, short enough that a
simulator whose learner has ended stops on its own. Whoever restarts learners
slower than that (resubmitting a cluster job) raises it on the simulators.
"""

from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass, field
from typing import Optional

from ..protocol.errors import ErrorCode
from .errors import ClientError, ConnectionLost, ServerError

__all__ = ["backoff_delay", "RetryPolicy", "DEFAULT_SHUTDOWN_GRACE_S", "SHUTDOWN_GRACE_ENV", "shutdown_grace"]

#: Seconds a reliable client keeps trying to reach a learner that said ``shutting_down``.
DEFAULT_SHUTDOWN_GRACE_S = 30.0
#: The environment variable that sets it for a whole process (e.g. the simulators of a cluster whose
#: learner jobs are stopped and resubmitted): a number of seconds, 0 to stop at once.
SHUTDOWN_GRACE_ENV = "RLINKS_SHUTDOWN_GRACE_S"


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
    #: Seconds to keep trying after ``ERROR shutting_down`` (attempts still count too).
    shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE_S

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
            return RetryPolicy.shutting_down(exc)
        if isinstance(exc, ClientError):
            return isinstance(exc, ConnectionLost)
        return isinstance(exc, OSError)

    @staticmethod
    def shutting_down(exc: BaseException) -> bool:
        """Whether ``exc`` is the learner's ``ERROR shutting_down`` (its run ended, or it is restarting)."""
        return isinstance(exc, ServerError) and exc.code == ErrorCode.SHUTTING_DOWN.value


def shutdown_grace(value: Optional[float] = None) -> float:
    """The ``shutdown_grace`` to use: ``value``, else ``$RLINKS_SHUTDOWN_GRACE_S``, else 30 s.

    Raises:
        ValueError: the value (given, or the variable's) is not a finite number >= 0.
    """
    where = "shutdown_grace"
    if value is None:
        text = os.environ.get(SHUTDOWN_GRACE_ENV, "").strip()
        if not text:
            return DEFAULT_SHUTDOWN_GRACE_S
        where = f"${SHUTDOWN_GRACE_ENV}"
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{where} must be a number of seconds, got {text!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{where} must be a non-negative number of seconds, got {value!r}")
    return float(value)
