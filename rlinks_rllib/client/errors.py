"""Errors raised by :class:`~rlinks_rllib.client.RLinkClient`.

Everything the client raises about the learner, the network or the bytes it
received is a :class:`ClientError`, itself an
:class:`~rlinks_rllib.protocol.errors.RLinksError` like every error of this
package. A peer's :class:`~rlinks_rllib.protocol.errors.ProtocolError` never
reaches a caller raw: it arrives as :class:`ProtocolViolation` (or
:class:`AuthenticationFailed`), with the server's address in the text.

The subclasses also derive from the built-in exception a caller would reach
for first (``ConnectionError``, ``TimeoutError``, ``NotImplementedError``),
so ``except TimeoutError`` works as expected. Mistakes in the caller's own
arguments stay ``ValueError`` / ``TypeError``.
"""

from __future__ import annotations

from ..protocol.errors import ErrorCode, RLinksError

__all__ = [
    "ClientError",
    "ClientClosed",
    "ConnectFailed",
    "ConnectionLost",
    "ServerTimeout",
    "ServerError",
    "TrainingEnded",
    "NotAgreed",
    "ProtocolViolation",
    "PickledConfigRefused",
    "TLSNotAvailable",
    "TLSFailed",
    "AuthenticationFailed",
]


class ClientError(RLinksError):
    """Base class of every error the client raises about the server or the link."""


class ClientClosed(ClientError):
    """The client was used after :meth:`RLinkClient.close`."""


class ConnectFailed(ClientError, ConnectionError):
    """No connection could be opened (and handshaken) within the retry budget."""


class ConnectionLost(ClientError, ConnectionError):
    """The connection dropped during a call and was not (or could not be) restored."""


class NoRunnerYet(ConnectionLost):
    """A directory answered but lists no runner that answers: the learner is still starting its runners."""


class ServerTimeout(ClientError, TimeoutError):
    """The server did not answer, or did not take our bytes, within ``timeout`` seconds.

    The connection is closed afterwards: a late reply would leave the stream
    out of step with the calls.
    """


class ServerError(ClientError):
    """The server sent ``ERROR`` (just before closing the connection).

    Attributes:
        code: machine-readable reason, one of ``protocol.ERROR_CODES`` for our
            server (``"limit_exceeded"``, ``"bad_episode"``, ...).
        message: the server's explanation, for people.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"server error [{code}]: {message}")
        self.code = code
        self.message = message


class TrainingEnded(ServerError):
    """The learner ended the run (``ERROR shutting_down``): the normal end of training.

    :class:`~rlinks_rllib.client.EnvClient` raises it from the call that
    learned it; leaving its ``with`` block on it is quiet.
    """


class AuthenticationFailed(ServerError):
    """The shared-secret handshake failed (code ``auth_failed``).

    Either the server refused our proof (wrong secret, or none: the server
    requires one), or the server could not prove it knows the secret (it
    has another one, does not authenticate at all, or is not who we think).
    Never retried.
    """

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.AUTH_FAILED.value, message)


class ProtocolViolation(ClientError):
    """The server sent bytes that are not valid RLlink, or a message out of turn.

    A protocol problem, not a network one: reliable mode does not retry it.

    Attributes:
        code: the ``code`` of the underlying :class:`~rlinks_rllib.protocol.ProtocolError`
            (``"bad_frame"``, ``"unsafe_payload"``, ...), or ``"unexpected_message"``.
    """

    def __init__(self, message: str, code: str = ErrorCode.UNEXPECTED_MESSAGE.value) -> None:
        super().__init__(message)
        self.code = code


class NotAgreed(ClientError):
    """The server did not agree to an extension the call needs (e.g. ``served_actions`` for ``act``).

    Retrying won't help: the server decides what it agrees to in the
    handshake (rlinks' runner agrees to ``served_actions`` only when it can
    compute actions for its model; RLlib's own server agrees to nothing).

    Attributes:
        extension: the extension's name.
    """

    def __init__(self, message: str, extension: str) -> None:
        super().__init__(message)
        self.extension = extension


class PickledConfigRefused(ClientError):
    """The server offers its config only as a pickle, and pickle was not allowed.

    RLlib's own server pickles its ``AlgorithmConfig``; unpickling runs code
    chosen by the server. Pass ``unsafe_allow_pickle=True`` to the client only
    for a server you trust completely.
    """


class TLSNotAvailable(ClientError, NotImplementedError):
    """A ``tls://`` address was given but this Python has no ``ssl`` module."""


class TLSFailed(ConnectFailed):
    """The TLS handshake failed for a reason retrying won't fix.

    The server's certificate is not signed by a CA in ``ca_file`` or is not
    for the host name connected to, or the server refused our client
    certificate (or that we sent none). Never retried.
    """
