"""The ``auth`` extension: both peers prove they know a shared secret, which never crosses the wire.

A server that requires authentication takes nothing from a connection until
the client has proved it knows the secret; a client that has a secret talks
only to a server that proves it knows it too. Four messages, the first two
being the ordinary handshake::

    client                                              server
      | PING  {rlinks: {extensions: [.., "auth"],  -->    |
      |                 auth_nonce: Nc}}                  |
      |                                           <--     | PONG {rlinks: {extensions: [.., "auth"],
      |                                                   |                auth_nonce: Ns}}
      | AUTH  {proof: HMAC(K, "client", Nc, Ns)}   -->    |
      |                                           <--     | AUTH_OK {proof: HMAC(K, "server", Nc, Ns)}
      |                                                   |   or ERROR auth_failed, then close

``K`` is the secret, ``Nc`` and ``Ns`` are 32 random bytes chosen afresh by
each side for each connection, and the proofs are HMAC-SHA256 over a fixed
label, the role and both nonces (see :func:`proof`). Because each proof
covers the other side's fresh nonce, a recorded exchange can't be replayed;
because the roles differ, a server's proof can't be reflected back to it as
a client's. The server proves itself only after the client has, so a
stranger probing an open port learns no value computed from the secret.
Proofs are compared with :func:`hmac.compare_digest`.

What this does not do: it authenticates the start of a connection, not the
bytes after it. On a network where someone can rewrite packets, use TLS as
well (``docs/SECURITY.md``). A secret that a person chose can be guessed
offline by anyone who recorded one exchange: make it random
(``openssl rand -hex 32``); fewer than :data:`MIN_SECRET_BYTES` bytes are refused.

Secrets come from the environment variable :data:`SECRET_ENV` or from a
file, never from a command line (which other users of a machine can read).
Surrounding whitespace is stripped from both, so a trailing newline in a
file does not matter.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from typing import Any, Mapping, Optional, Union

from .errors import AuthFailed
from .extensions import Extension, Offer
from .messages import auth as auth_message, auth_ok as auth_ok_message

__all__ = [
    "SECRET_ENV",
    "NONCE_KEY",
    "NONCE_BYTES",
    "PROOF_BYTES",
    "MIN_SECRET_BYTES",
    "MAX_SECRET_BYTES",
    "normalize_secret",
    "load_secret",
    "secret_file_is_private",
    "proof",
    "ServerAuth",
    "ClientAuth",
]

#: Environment variable both sides read the secret from.
SECRET_ENV = "RLINKS_SECRET"
#: Key of the nonce in the ``rlinks`` offer of PING and PONG.
NONCE_KEY = "auth_nonce"
NONCE_BYTES = 32
PROOF_BYTES = hashlib.sha256().digest_size
MIN_SECRET_BYTES = 16
MAX_SECRET_BYTES = 4096

_LABEL = b"rlinks-auth-v1"
_CLIENT = b"client"
_SERVER = b"server"

Secret = Union[str, bytes]


def normalize_secret(secret: Secret) -> bytes:
    """The secret as the bytes both sides feed to HMAC (UTF-8, whitespace stripped).

    Raises:
        TypeError: ``secret`` is neither str nor bytes.
        ValueError: it is shorter than ``MIN_SECRET_BYTES`` or longer than ``MAX_SECRET_BYTES``.
    """
    if isinstance(secret, str):
        secret = secret.encode("utf-8")
    if not isinstance(secret, (bytes, bytearray)):
        raise TypeError(f"an rlinks secret must be str or bytes, got {type(secret).__name__}")
    secret = bytes(secret).strip()
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(
            f"the rlinks secret is {len(secret)} bytes; at least {MIN_SECRET_BYTES} are needed. "
            "Make one with: openssl rand -hex 32"
        )
    if len(secret) > MAX_SECRET_BYTES:
        raise ValueError(f"the rlinks secret is longer than {MAX_SECRET_BYTES} bytes")
    return secret


def load_secret(secret_file: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> Optional[bytes]:
    """Read the secret from ``secret_file`` if given, else from ``$RLINKS_SECRET``; ``None`` if neither.

    The one function of this package that touches the file system.

    Raises:
        OSError: ``secret_file`` can't be read.
        ValueError: the secret found is too short, too long or empty.
    """
    if secret_file:
        with open(secret_file, "rb") as f:
            raw = f.read(MAX_SECRET_BYTES + 64)
        try:
            return normalize_secret(raw)
        except ValueError as exc:
            raise ValueError(f"{secret_file}: {exc}") from None
    env = os.environ if environ is None else environ
    value = env.get(SECRET_ENV)
    if value is None or value == "":
        return None
    try:
        return normalize_secret(value)
    except ValueError as exc:
        raise ValueError(f"${SECRET_ENV}: {exc}") from None


def secret_file_is_private(secret_file: str) -> bool:
    """Whether only the owner may read ``secret_file`` (mode ``0600`` or stricter).

    Raises:
        OSError: the file can't be looked at.
    """
    return not os.stat(secret_file).st_mode & (stat.S_IRWXG | stat.S_IRWXO)


def proof(secret: bytes, role: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    """HMAC-SHA256 of ``"rlinks-auth-v1" 0 role 0 client_nonce server_nonce`` under ``secret``.

    Both nonces have a fixed length, so the concatenation is unambiguous.
    """
    return hmac.new(secret, _LABEL + b"\0" + role + b"\0" + client_nonce + server_nonce, hashlib.sha256).digest()


def _nonce_of(offer: Optional[Offer], who: str) -> bytes:
    if offer is None or Extension.AUTH.value not in offer.extensions:
        raise AuthFailed(f"the {who} did not offer authentication ('auth' extension), which is required here")
    nonce = offer.extra.get(NONCE_KEY)
    if type(nonce) is not bytes or len(nonce) != NONCE_BYTES:
        raise AuthFailed(f"the {who}'s '{NONCE_KEY}' must be {NONCE_BYTES} bytes (msgpack bin)")
    return nonce


def _check_proof(expected: bytes, message: Mapping[str, Any], who: str) -> None:
    got = message.get("proof")
    if type(got) is not bytes or not hmac.compare_digest(expected, got):
        raise AuthFailed(f"the {who} did not prove it knows the shared secret")


class ServerAuth:
    """The server's side of one connection's challenge and response.

    Args:
        secret: the normalized shared secret (see :func:`normalize_secret`).
    """

    def __init__(self, secret: bytes) -> None:
        self._secret = secret
        self.nonce = secrets.token_bytes(NONCE_BYTES)
        self._client_nonce: Optional[bytes] = None

    def challenge(self, offer: Optional[Offer]) -> dict:
        """Read the client's nonce from its PING offer; return the keys to add to our PONG offer.

        Raises:
            AuthFailed: the client offered no ``auth`` or no well-formed nonce.
        """
        self._client_nonce = _nonce_of(offer, "client")
        return {NONCE_KEY: self.nonce}

    def accept(self, message: Mapping[str, Any]) -> dict:
        """Check the client's ``AUTH``; return the ``AUTH_OK`` to send.

        Raises:
            AuthFailed: the proof is wrong, or no challenge was made.
        """
        if self._client_nonce is None:
            raise AuthFailed("AUTH before the handshake")
        _check_proof(proof(self._secret, _CLIENT, self._client_nonce, self.nonce), message, "client")
        return auth_ok_message(proof(self._secret, _SERVER, self._client_nonce, self.nonce))


class ClientAuth:
    """The client's side of one connection's challenge and response.

    Args:
        secret: the normalized shared secret (see :func:`normalize_secret`).
    """

    def __init__(self, secret: bytes) -> None:
        self._secret = secret
        self.nonce = secrets.token_bytes(NONCE_BYTES)
        self._server_nonce: Optional[bytes] = None

    def offer(self) -> dict:
        """The keys to add to our PING offer (next to ``"auth"`` in its extensions)."""
        return {NONCE_KEY: self.nonce}

    def respond(self, server_offer: Optional[Offer]) -> dict:
        """Read the server's nonce from its PONG; return the ``AUTH`` to send.

        Raises:
            AuthFailed: the server did not agree to ``auth`` (it can't prove
                who it is) or sent no well-formed nonce.
        """
        self._server_nonce = _nonce_of(server_offer, "server")
        return auth_message(proof(self._secret, _CLIENT, self.nonce, self._server_nonce))

    def confirm(self, message: Mapping[str, Any]) -> None:
        """Check the server's ``AUTH_OK``.

        Raises:
            AuthFailed: the server's proof is wrong: it does not know the secret.
        """
        if self._server_nonce is None:
            raise AuthFailed("AUTH_OK before AUTH")
        _check_proof(proof(self._secret, _SERVER, self.nonce, self._server_nonce), message, "server")
