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

A client may also start before its learner listens (Docker Compose, a pod, a
job script, two terminals), and a learner takes 10-30 s to listen. So a
client that has never reached its learner keeps trying for ``connect_wait``
seconds (:data:`DEFAULT_CONNECT_WAIT_S`, or ``$RLINKS_CONNECT_WAIT_S``; ``0``
gives up after ``attempts`` as before), with one log line saying what it
waits for and the same backoff as a reconnection (:class:`ConnectWait`).
"""

from __future__ import annotations

import errno
import logging
import math
import os
import random
import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from ...protocol.errors import ErrorCode
from ..errors import ClientError, ConnectionLost, NoRunnerYet, ServerError

__all__ = [
    "backoff_delay", "RetryPolicy", "ConnectWait",
    "DEFAULT_SHUTDOWN_GRACE_S", "SHUTDOWN_GRACE_ENV", "shutdown_grace",
    "DEFAULT_CONNECT_WAIT_S", "CONNECT_WAIT_ENV", "connect_wait",
]

#: What a connect that found nothing listening fails with, besides a refusal, a timeout and an unknown name.
_NOT_LISTENING = frozenset({errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EHOSTDOWN})

#: Seconds a reliable client keeps trying to reach a learner that said ``shutting_down``.
DEFAULT_SHUTDOWN_GRACE_S = 30.0
#: The environment variable that sets it for a whole process (e.g. the simulators of a cluster whose
#: learner jobs are stopped and resubmitted): a number of seconds, 0 to stop at once.
SHUTDOWN_GRACE_ENV = "RLINKS_SHUTDOWN_GRACE_S"
#: Seconds a client that has never reached its learner keeps trying (a learner takes 10-30 s to listen).
#: The C++ (``connect_wait_s``) and JavaScript (``connectWait``) clients have the same default.
DEFAULT_CONNECT_WAIT_S = 60.0
#: The environment variable that sets it for a whole process: a number of seconds, 0 for no wait.
CONNECT_WAIT_ENV = "RLINKS_CONNECT_WAIT_S"


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
    #: Seconds a first connection keeps trying a learner that is not up yet (attempts still count too).
    connect_wait: float = DEFAULT_CONNECT_WAIT_S

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


class ConnectWait:
    """One connect's wait for a learner that does not listen yet.

    Started by the first failure a retry may get past (:meth:`failed`), it
    says once, in a log line, what it waits for and for how long, and keeps
    the attempts going until ``seconds`` after the connect began. A
    ``shutting_down`` does not start it: that learner was up (its own grace
    is ``shutdown_grace``).

    Args:
        seconds: how long to keep trying; 0 never waits.
        target: what is waited for, for the log line ("the learner at tcp://...").
        log: where the one line goes (a warning: it is the only sign of life for up to ``seconds``).
        clock: ``time.monotonic`` (a test may pass another).
    """

    def __init__(self, seconds: float, target: str, log: logging.Logger,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._target = target
        self._log = log
        self._clock = clock
        self._until = clock() + seconds
        self._said = False

    @property
    def started(self) -> bool:
        """Whether an attempt failed as one does before the learner listens, so the wait began."""
        return self._said

    @property
    def waiting(self) -> bool:
        """Whether the wait has started and is not over: another attempt is due whatever ``attempts`` says."""
        return self._said and self._clock() < self._until

    def left(self) -> float:
        """Seconds until the wait is over (0 once it is)."""
        return max(0.0, self._until - self._clock())

    @staticmethod
    def not_up_yet(exc: BaseException) -> bool:
        """Whether ``exc`` says nothing listens there yet: a connect that failed (refused,
        unreachable, a name not resolved yet), or a directory with no runner yet.

        A server that took the connection and then closed it or answered
        in another tongue (a TLS port spoken to in plain TCP, a plain port
        in TLS, a full server, ``shutting_down``) is up: the usual attempts
        apply.
        """
        if isinstance(exc, NoRunnerYet):
            return True
        if isinstance(exc, (ClientError, ssl.SSLError)):
            return False
        return (isinstance(exc, (ConnectionRefusedError, socket.gaierror, TimeoutError))
                or getattr(exc, "errno", None) in _NOT_LISTENING)

    def failed(self, exc: BaseException) -> None:
        """An attempt failed with ``exc``: start the wait if ``exc`` says the learner may not be up yet."""
        if self._said or self.seconds <= 0 or not self.not_up_yet(exc):
            return
        self._said = True
        self._log.warning("waiting up to %g s for %s to listen (connect_wait, $%s): %s",
                          self.seconds, self._target, CONNECT_WAIT_ENV, exc)


def _seconds(value: Optional[float], env: str, default: float, name: str) -> float:
    """``value``, else ``$env``, else ``default``, checked to be a finite number of seconds >= 0.

    Raises:
        ValueError: the value (given, or the variable's) is not a finite number >= 0.
    """
    where = name
    if value is None:
        text = os.environ.get(env, "").strip()
        if not text:
            return default
        where = f"${env}"
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{where} must be a number of seconds, got {text!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{where} must be a non-negative number of seconds, got {value!r}")
    return float(value)


def shutdown_grace(value: Optional[float] = None) -> float:
    """The ``shutdown_grace`` to use: ``value``, else ``$RLINKS_SHUTDOWN_GRACE_S``, else 30 s.

    Raises:
        ValueError: the value (given, or the variable's) is not a finite number >= 0.
    """
    return _seconds(value, SHUTDOWN_GRACE_ENV, DEFAULT_SHUTDOWN_GRACE_S, "shutdown_grace")


def connect_wait(value: Optional[float] = None) -> float:
    """The ``connect_wait`` to use: ``value``, else ``$RLINKS_CONNECT_WAIT_S``, else 60 s.

    Raises:
        ValueError: the value (given, or the variable's) is not a finite number >= 0.
    """
    return _seconds(value, CONNECT_WAIT_ENV, DEFAULT_CONNECT_WAIT_S, "connect_wait")
