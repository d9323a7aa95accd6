"""One RLinkClient used by a simulator's loop and its background sender, one call at a time.

:class:`~.connection.RLinkClient` is not thread-safe; :class:`SharedClient`
serialises its calls with a lock, so the loop (asking for weights, for a new
agent's module, for actions) and a sender thread (delivering batches) can
share one connection. It also turns the learner's ``shutting_down`` into
:class:`~rlinks_rllib.client.errors.TrainingEnded`, the one exception a simulator's loop is
expected to end on: at once, or for a reliable client once it could not
reconnect after it (a learner that stopped and did not come back).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, TypeVar

from ...protocol.errors import ErrorCode
from ..errors import ConnectFailed, ConnectionLost, ServerError, TrainingEnded
from .connection import RLinkClient

__all__ = ["SharedClient"]

T = TypeVar("T")


class SharedClient:
    """An :class:`RLinkClient` behind a lock.

    Args:
        client: the connection; :meth:`close` closes it.
    """

    def __init__(self, client: RLinkClient) -> None:
        self.raw = client
        self._lock = threading.Lock()

    def call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``method(*args, **kwargs)`` (an RLinkClient method) under the lock.

        Raises:
            TrainingEnded: the learner said ``shutting_down`` (and, reliable,
                could not be reached again within the retry budget).
            Whatever ``method`` raises otherwise.
        """
        with self._lock:
            try:
                return method(*args, **kwargs)
            except TrainingEnded:
                raise
            except ServerError as exc:
                if exc.code == ErrorCode.SHUTTING_DOWN:
                    raise TrainingEnded(exc.code, exc.message) from None
                raise
            except (ConnectFailed, ConnectionLost) as exc:
                ended = exc.__cause__
                if isinstance(ended, ServerError) and ended.code == ErrorCode.SHUTTING_DOWN:
                    raise TrainingEnded(ended.code, ended.message) from exc
                raise

    def close(self) -> None:
        """Close the connection; safe from any thread (a call blocked on it ends)."""
        self.raw.close()
