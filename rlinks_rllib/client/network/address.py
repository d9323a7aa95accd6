"""Where a learner listens, from the strings people type.

Accepted forms::

    HOST:PORT            localhost:5555, 10.0.0.7:5555
    tcp://HOST:PORT      the same, with the scheme spelled out
    [V6]:PORT            [::1]:5555, tcp://[fe80::1%eth0]:5555
    tls://HOST:PORT      the same over TLS
    ws://HOST:PORT       RLlink over WebSocket (PROTOCOL.md 16), on the same port
    wss://HOST:PORT      the same over TLS (a trailing ``/`` is allowed on both)

A ``(host, port)`` tuple or an :class:`Address` is taken as is (checked).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

__all__ = ["Address", "parse_address", "SCHEMES"]

#: URL schemes :func:`parse_address` recognises.
SCHEMES = ("tcp", "tls", "ws", "wss")


@dataclass(frozen=True)
class Address:
    """A learner's host and port, whether the link is to use TLS, and whether RLlink travels over WebSocket."""

    host: str
    port: int
    tls: bool = False
    websocket: bool = False

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def scheme(self) -> str:
        """``tcp``, ``tls``, ``ws`` or ``wss``."""
        if self.websocket:
            return "wss" if self.tls else "ws"
        return "tls" if self.tls else "tcp"


AddressLike = Union[str, tuple, Address]


def parse_address(address: AddressLike) -> Address:
    """Turn ``address`` into an :class:`Address`.

    Raises:
        ValueError: the text is not one of the accepted forms, the port is
            not an integer in 1..65535, or the host is empty. The message
            repeats the input and shows the expected form.
        TypeError: ``address`` is neither a string, a ``(host, port)`` pair
            nor an :class:`Address`.
    """
    if isinstance(address, Address):
        return Address(_check_host(address.host, str(address)), _check_port(address.port, str(address)), address.tls,
                       address.websocket)
    if isinstance(address, tuple):
        if len(address) != 2:
            raise ValueError(f"an address tuple must be (host, port), got {address!r}")
        host, port = address
        if not isinstance(host, str):
            raise ValueError(f"host must be a string, got {host!r}")
        return Address(_check_host(host, repr(address)), _check_port(port, repr(address)))
    if not isinstance(address, str):
        raise TypeError(f"address must be a 'HOST:PORT' string, a (host, port) tuple or an Address, got {type(address).__name__}")

    text = address.strip()
    tls = websocket = False
    if "://" in text:
        scheme, _, text = text.partition("://")
        scheme = scheme.lower()
        if scheme not in SCHEMES:
            raise ValueError(f"unknown scheme {scheme!r} in {address!r}; use tcp://HOST:PORT (or just HOST:PORT)")
        tls = scheme in ("tls", "wss")
        websocket = scheme in ("ws", "wss")
        if websocket and text.endswith("/"):
            text = text[:-1]
    if "/" in text:
        raise ValueError(f"an RLlink address has no path: {address!r}; use HOST:PORT")

    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            raise ValueError(f"bad IPv6 address {address!r}; use [ADDR]:PORT, e.g. [::1]:5555")
        port_text = rest[1:]
        if ":" not in host:
            raise ValueError(f"brackets are for IPv6 addresses only, got {address!r}")
    else:
        host, colon, port_text = text.rpartition(":")
        if not colon:
            raise ValueError(f"address {address!r} has no port; use HOST:PORT, e.g. localhost:5555")
        if ":" in host:
            raise ValueError(f"put IPv6 addresses in brackets: [{host}]:{port_text} (got {address!r})")
    return Address(_check_host(host, repr(address)), _check_port(port_text, repr(address)), tls, websocket)


def _check_host(host: str, shown: str) -> str:
    if not host or host != host.strip():
        raise ValueError(f"address {shown} has an empty or padded host")
    return host


def _check_port(port: object, shown: str) -> int:
    if isinstance(port, str):
        if not port.isascii() or not port.isdigit():
            raise ValueError(f"port must be a number in 1..65535, got {port!r} in {shown}")
        value = int(port)
    elif type(port) is int:
        value = port
    else:
        raise ValueError(f"port must be an int in 1..65535, got {port!r} in {shown}")
    if not 1 <= value <= 65535:
        raise ValueError(f"port must be in 1..65535, got {value} in {shown}")
    return value
