"""The server side's TLS context, one recipe for every port (runners, directory, sample server).

Callers that hold :class:`~rlinks_rllib.server.settings.RLinkSettings` use :func:`server_ssl_context`;
the sample server, which has no settings object, passes the file names to
:func:`tls_server_context`.
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from ..settings import RLinkSettings

__all__ = ["tls_server_context", "server_ssl_context"]


def tls_server_context(cert_file: str, key_file: Optional[str] = None,
                       client_ca_file: Optional[str] = None) -> ssl.SSLContext:
    """A server-side TLS context for ``cert_file`` (and its key, if in a file of its own).

    TLS 1.2 at least; with ``client_ca_file`` every client must present a
    certificate that CA signed.

    Raises:
        OSError: a certificate or key file can't be read.
        ssl.SSLError: a file is not a valid PEM certificate or key, or the key doesn't match.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file or None)
    if client_ca_file:
        context.load_verify_locations(cafile=client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def server_ssl_context(settings: "RLinkSettings") -> Optional[ssl.SSLContext]:
    """The TLS context the settings ask for; ``None`` for plain TCP.

    Raises:
        As :func:`tls_server_context`.
    """
    if not settings.tls:
        return None
    return tls_server_context(settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file)
