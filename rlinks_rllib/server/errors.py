"""What a runner refuses that the protocol layer lets through.

:class:`~rlinks_rllib.protocol.errors.ProtocolError` covers a peer that breaks
RLlink; :class:`IngestError` covers a well-formed message this runner still
can't take. Both carry the :class:`~rlinks_rllib.protocol.errors.ErrorCode`
that the session sends in its ``ERROR`` before closing the connection.
"""

from __future__ import annotations

from ..protocol.errors import ErrorCode, RLinksError

__all__ = ["IngestError"]


class IngestError(RLinksError, ValueError):
    """Episodes that are well-formed RLlink but not acceptable to this runner.

    Attributes:
        code: the ``ERROR`` code to send (``bad_episode``, ``limit_exceeded``,
            or ``server_error`` when the runner itself can't answer).
    """

    def __init__(self, message: str, code: ErrorCode = ErrorCode.BAD_EPISODE) -> None:
        super().__init__(message)
        self.code = code
