"""``rlinks web``: serve the web game (``clients/js/web/``) and the JavaScript client to a browser.

The page loads the client's sources as they are (``src/`` and the CartPole
of ``examples/``, through the page's import map; the client has no runtime
dependency), so what is served is the ``clients/js`` folder of a checkout,
and of it only those parts (:data:`SERVED`): not the tests, not
``node_modules``. The wheel does not carry ``clients/js``: the client is an
npm package, and a second copy inside the wheel would be one more thing to
keep in step; ``--js-dir`` points
``rlinks web`` at a checkout's ``clients/js`` from anywhere.

:class:`WebServer` is a small static server (the standard library's
``http.server``, on a thread of its own): ``GET`` and ``HEAD`` only, a path
with a ``..``, a hidden or an empty part refused with 403, a file outside
:data:`SERVED` (a symbolic link out of the folder included) 404, and
``.js``/``.mjs`` as ``text/javascript`` (a browser loads a module only with a
JavaScript MIME type, which the system's table does not always give).
"""

from __future__ import annotations

import http.server
import logging
import posixpath
import shutil
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional
from urllib.parse import unquote, urlsplit

from .client.network.address import Address, parse_address

__all__ = ["WebServer", "SERVED", "PAGE", "DEFAULT_PORT", "DEFAULT_LEARNER", "WILDCARD_HOSTS", "js_package",
           "learner_address", "page_url", "origin"]

log = logging.getLogger(__name__)

#: ``rlinks web``'s port unless ``--port`` says otherwise.
DEFAULT_PORT = 8000
#: The learner the page connects to unless ``--learner`` says otherwise (``rlinks learner``'s default port).
DEFAULT_LEARNER = "ws://127.0.0.1:5555"
#: The page's folder inside ``clients/js``; ``/`` is sent there.
PAGE = "web"
#: What the page loads: the folders of ``clients/js`` that are served, nothing else.
SERVED = (PAGE, "src", "examples")
#: Content types by suffix; anything else is ``application/octet-stream``.
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".map": "application/json",
    ".ts": "text/plain; charset=utf-8",
    ".md": "text/plain; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".wasm": "application/wasm",
}
_CHUNK = 64 * 1024
#: ``--host`` values that listen on every interface (the URL printed uses 127.0.0.1).
WILDCARD_HOSTS = ("", "0.0.0.0", "::")


def js_package(js_dir: Optional[str] = None) -> Path:
    """The ``clients/js`` folder to serve: ``js_dir``, or the checkout's this package was imported from.

    Raises:
        FileNotFoundError: no such folder, or it is not the JavaScript client (no ``web/index.html``);
            the message says what to pass.
    """
    if js_dir is not None:
        folder = Path(js_dir).resolve()
    else:
        folder = Path(__file__).resolve().parent.parent / "clients" / "js"
    if not (folder / PAGE / "index.html").is_file():
        if js_dir is not None:
            raise FileNotFoundError(f"{js_dir} is not the JavaScript client's folder (no {PAGE}/index.html in it)")
        raise FileNotFoundError("the web game is not installed with the package (the wheel does not carry "
                                "clients/js): run rlinks web from a checkout of rlinks-rllib, or pass "
                                "--js-dir CHECKOUT/clients/js")
    return folder


def learner_address(text: str) -> Address:
    """The learner's address as the page takes it: ``ws://`` or ``wss://`` (``HOST:PORT`` means ``ws://``).

    Raises:
        ValueError: not an address, or a ``tcp://``/``tls://`` one (a browser speaks only WebSocket).
    """
    address = parse_address(text if "://" in text else f"ws://{text}")
    if not address.websocket:
        raise ValueError(f"a browser connects over WebSocket only: give --learner ws://HOST:PORT "
                         f"(or wss://), not {text!r}")
    return address


def _url_host(host: str) -> str:
    host = "127.0.0.1" if host in WILDCARD_HOSTS else host
    return f"[{host}]" if ":" in host else host


def origin(host: str, port: int) -> str:
    """The page's origin when it is opened at ``host:port`` (what ``ws_allowed_origins`` must hold)."""
    return f"http://{_url_host(host)}:{port}"


def page_url(host: str, port: int, learner: Address) -> str:
    """The URL that opens the game against ``learner`` (a ``ws://``/``wss://`` address)."""
    return f"{origin(host, port)}/{PAGE}/?address={learner}"


class _Handler(http.server.BaseHTTPRequestHandler):
    """Files of :data:`SERVED` under the server's folder, nothing else (see the module docstring)."""

    server: "_Server"
    server_version = "rlinks-web"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._serve(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._serve(body=False)

    def _serve(self, *, body: bool) -> None:
        split = urlsplit(self.path)
        path = unquote(split.path)
        if path in ("", "/"):
            self._redirect(f"/{PAGE}/" + (f"?{split.query}" if split.query else ""))
            return
        parts = path.split("/")[1:]
        trailing = parts[-1] == ""
        if trailing:
            parts = parts[:-1]
        if not path.startswith("/") or any(p in ("", ".", "..") or p.startswith(".") or "\\" in p or "\0" in p
                                           for p in parts):
            self.send_error(403, "path refused (empty, hidden or '..' parts)")
            return
        relative = "/".join(parts)
        if not any(relative == served or relative.startswith(served + "/") for served in SERVED):
            self.send_error(404, f"not served (rlinks web serves {', '.join(s + '/' for s in SERVED)})")
            return
        root = self.server.root
        target = (root / relative).resolve()
        if not target.is_relative_to(root):  # a symbolic link out of the folder
            self.send_error(404, "not served")
            return
        if target.is_dir():
            if not trailing:
                self._redirect(posixpath.join(split.path, "") + (f"?{split.query}" if split.query else ""))
                return
            target = target / "index.html"
        if not target.is_file():
            self.send_error(404, "no such file")
            return
        self._send_file(target, body=body)

    def _send_file(self, target: Path, *, body: bool) -> None:
        try:
            handle = target.open("rb")
        except OSError as exc:
            self.send_error(404, f"can't read it: {exc.strerror}")
            return
        with handle:
            size = target.stat().st_size
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPES.get(target.suffix, "application/octet-stream"))
            self.send_header("Content-Length", str(size))
            self.send_header("Cache-Control", "no-cache")  # an edit to the page shows on the next load
            self.end_headers()
            if body:
                shutil.copyfileobj(handle, self.wfile, _CHUNK)

    def _redirect(self, location: str) -> None:
        self.send_response(301)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
        log.debug("%s %s", self.address_string(), format % args)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], root: Path) -> None:
        self.root = root
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)


@dataclass
class WebServer:
    """The static server on a thread: ``with WebServer(folder, host, port) as web: ... web.port``.

    Args:
        root: the ``clients/js`` folder (:func:`js_package`).
        host: where to listen (``127.0.0.1``: this machine only).
        port: the port (0: any free one; :attr:`port` says which).

    Raises:
        OSError: the port is taken or the host is not this machine's.
    """

    root: Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT

    def __post_init__(self) -> None:
        self._server = _Server((self.host, self.port), Path(self.root).resolve())
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="rlinks-web", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return origin(self.host, self.port)

    def close(self) -> None:
        """Stop serving and close the socket; returns once the serving thread has ended."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> "WebServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
