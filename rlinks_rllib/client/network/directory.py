"""Asking a learner's directory where its runners are (the ``endpoints`` extension).

A learner with several runners can publish one address, its directory: a
client that reaches it sends ``GET_ENDPOINTS`` and gets the runners back,
least-loaded first, then connects to one of them.
:class:`~.connection.RLinkClient` does this on its own whenever its address
turns out to be a directory; :func:`ask_directory` is the same question
asked once, for tools (``rlinks endpoints HOST:PORT``).
"""

from __future__ import annotations

import logging
import random
import time
from typing import Any, Callable, Optional

from ..._version import CLIENT_AGENT
from ...protocol.auth import Secret, load_secret, normalize_secret
from ...protocol.connection import Connection, EndpointsReceived, Role
from ...protocol.extensions import Extension
from ...protocol.limits import DEFAULT_MAX_FRAME_BYTES
from ..errors import ClientError, ConnectFailed
from .address import AddressLike, parse_address
from .link import Link
from .retry import ConnectWait, backoff_delay, connect_wait as _connect_wait
from .transport import Transport, tls_context

__all__ = ["ask_directory", "fetch_endpoints"]

#: The backoff between attempts while a directory that does not listen yet is waited for (RLinkClient's defaults).
_BACKOFF_INITIAL_S, _BACKOFF_CAP_S = 0.2, 10.0


def fetch_endpoints(link: Link) -> list[dict[str, Any]]:
    """Ask the directory at the other end of ``link`` (handshake done) for its runners.

    Returns the entries as the directory sent them, least-loaded first, less
    any without a ``str`` ``host`` and an ``int`` ``port``. Our directory also
    sends ``worker_index`` and ``clients`` (how many clients the runner has).

    Raises:
        ServerTimeout, ServerError, ConnectionLost, ProtocolViolation: as for any request.
    """
    link.conn.send_get_endpoints()
    link.write("GET_ENDPOINTS")
    reply = link.wait_for(EndpointsReceived, "ENDPOINTS (from the directory)")
    return [
        entry for entry in reply.endpoints
        if isinstance(entry, dict) and type(entry.get("host")) is str and type(entry.get("port")) is int
    ]


def ask_directory(
    address: AddressLike,
    *,
    timeout: float = 10.0,
    connect_timeout: float = 10.0,
    ca_file: Optional[str] = None,
    cert_file: Optional[str] = None,
    key_file: Optional[str] = None,
    tls_server_name: Optional[str] = None,
    secret: Optional[Secret] = None,
    secret_file: Optional[str] = None,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    connect_wait: Optional[float] = None,
    logger: Optional[logging.Logger] = None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[dict[str, Any]]:
    """The runners a learner's directory lists, least-loaded first (see :func:`fetch_endpoints`).

    One connection, closed before returning. A directory that does not
    listen yet (refused) is tried again for ``connect_wait`` seconds
    (``None``: ``$RLINKS_CONNECT_WAIT_S``, else 60 s; 0: one attempt), with
    one warning on ``logger`` and :class:`~.connection.RLinkClient`'s
    backoff; ``sleep`` waits between attempts. The TLS and secret
    options are :class:`~.connection.RLinkClient`'s: with a secret (``secret``,
    ``secret_file`` or ``$RLINKS_SECRET``) the directory must prove it knows
    it, and a directory that requires one answers only a client that does.

    Example::

        for runner in ask_directory("learner.example:5555"):
            print(runner["host"], runner["port"], runner.get("clients"))

    Raises:
        ValueError, TypeError: ``address`` is malformed, TLS options for a ``tcp://`` address,
            both ``secret`` and ``secret_file``, a malformed secret, or a bad ``connect_wait``.
        OSError: ``secret_file`` can't be read.
        AuthenticationFailed: a wrong or missing secret on either side.
        ConnectFailed: no connection could be opened within ``connect_wait`` (:class:`TLSFailed`:
            the server's certificate is not trusted).
        ClientError: the peer answered, but is not a directory (a runner, or RLlib's own server).
        ServerTimeout, ServerError, ConnectionLost, ProtocolViolation: as for any request.
    """
    target = parse_address(address)
    if secret is not None and secret_file is not None:
        raise ValueError("pass secret or secret_file, not both")
    key = normalize_secret(secret) if secret is not None else load_secret(secret_file)
    context = tls_context(target, ca_file, cert_file, key_file, tls_server_name)
    seconds = _connect_wait(connect_wait)
    waiting = ConnectWait(seconds, f"the directory at {target}", logger or logging.getLogger(__name__))
    rng = random.Random()
    failures = 0
    while True:
        try:
            transport = Transport.open(target, connect_timeout=connect_timeout, ssl_context=context,
                                       server_name=tls_server_name)
            break
        except OSError as exc:
            if isinstance(exc, ConnectFailed):  # TLSFailed: the certificate
                raise
            waiting.failed(exc)
            if not waiting.waiting:
                waited = f" within {seconds:g} s (connect_wait)" if failures else ""
                raise ConnectFailed(f"could not connect to {target}{waited}: {exc}") from exc
            sleep(min(backoff_delay(failures, _BACKOFF_INITIAL_S, _BACKOFF_CAP_S, rng), waiting.left()))
            failures += 1
    conn = Connection(Role.CLIENT, extensions=(Extension.ENDPOINTS,), agent=CLIENT_AGENT, secret=key,
                      max_frame_bytes=max_frame_bytes)
    link = Link(transport, conn, timeout=timeout)
    try:
        done = link.handshake()
        if not done.peer_is_directory:
            kind = "a plain RLlink server" if done.plain else "a runner"
            raise ClientError(f"{target} is not an rlinks directory (it is {kind}); connect to it directly")
        return fetch_endpoints(link)
    finally:
        link.close()
