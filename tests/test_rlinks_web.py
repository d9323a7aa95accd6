"""``rlinks web``: the static server of the web game (``rlinks_rllib/web.py``), as a user starts it.

The command runs as a process on a free port and is asked over HTTP: the
page and a module with a JavaScript MIME type (a browser loads nothing
else), ``/`` sent to the page, ``..`` refused, a missing file and the parts
of ``clients/js`` the page does not load answered 404; it stops on SIGTERM.
Also: ``--learner`` takes only WebSocket addresses, and ``rlinks learner
--ws-allowed-origin`` adds to the config's origins. No Node or npm needed:
the page and the client it loads have no npm dependency.
"""

from __future__ import annotations

import http.client
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "clients" / "js"

pytestmark = pytest.mark.timeout(120)


class RlinksWeb:
    """``rlinks web --port 0 [OPTIONS]`` for a test's ``with``: what it printed, then SIGTERM at the end.

    Attributes:
        origin: the page's origin (``http://127.0.0.1:PORT``), read from what it printed.
        url: the URL it says to open.
        lines: its first lines.
    """

    def __init__(self, *options: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "rlinks_rllib", "web", "--port", "0", *options],
                                        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def __enter__(self) -> "RlinksWeb":
        self.lines: list[str] = []
        while not self.lines or not self.lines[-1].startswith("Ctrl-C"):
            line = self.process.stdout.readline()  # bounded by the test's timeout
            assert line, "rlinks web ended before serving:\n" + "".join(self.lines)
            self.lines.append(line)
        text = "".join(self.lines)
        self.url = re.search(r"^open (\S+)$", text, re.M).group(1)
        self.origin = re.search(r"--ws-allowed-origin (\S+)$", text, re.M).group(1)
        return self

    def get(self, path: str, method: str = "GET") -> http.client.HTTPResponse:
        """One request (the path sent as it is, ``..`` included); the response with its body read."""
        host, port = self.origin.removeprefix("http://").rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            conn.request(method, path)
            response = conn.getresponse()
            response.body = response.read()
            return response
        finally:
            conn.close()

    def __exit__(self, *exc) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate(timeout=10)


@pytest.fixture(scope="module")
def served():
    with RlinksWeb("--learner", "127.0.0.1:6123") as web:
        yield web
    assert web.process.returncode == 0, "rlinks web did not stop cleanly on SIGTERM"


def test_it_says_what_to_open_and_the_learner_command_that_lets_the_page_in(served):
    assert served.url == f"{served.origin}/web/?address=ws://127.0.0.1:6123"
    assert f"rlinks learner --config ppo_cartpole --port 6123 --ws-allowed-origin {served.origin}" in "".join(
        served.lines)


def test_the_page_and_its_modules_with_a_javascript_mime_type(served):
    page = served.get("/web/")
    assert page.status == 200 and page.getheader("Content-Type").startswith("text/html")
    assert page.body == (PACKAGE / "web" / "index.html").read_bytes()
    for path in ("/web/game.js", "/src/index.js", "/src/msgpack.js", "/examples/cartpole_env.js"):
        module = served.get(path)
        assert module.status == 200, path
        assert module.getheader("Content-Type").split(";")[0] == "text/javascript", path
        assert module.body == (PACKAGE / path.lstrip("/")).read_bytes()
    head = served.get("/src/index.js", method="HEAD")
    assert head.status == 200 and head.body == b"" and int(head.getheader("Content-Length")) > 0


def test_the_root_and_a_folder_without_its_slash_lead_to_the_page_with_the_query(served):
    for path, where in (("/", "/web/"), ("/?address=ws://x:1", "/web/?address=ws://x:1"), ("/web", "/web/")):
        answer = served.get(path)
        assert (answer.status, answer.getheader("Location")) == (301, where), path


def test_paths_out_of_the_folder_are_refused(served):
    for path in ("/web/../package.json", "/web/%2e%2e/package.json", "/../../etc/passwd", "/src/..%2f..%2fREADME.md",
                 "/web/.hidden", "/web//game.js", "/web/..\\package.json"):
        assert served.get(path).status == 403, path


def test_missing_files_and_what_the_page_does_not_load_are_404(served):
    for path in ("/web/no_such_file.js", "/package.json", "/test/vectors.test.js", "/node_modules/ws/index.js",
                 "/node_modules/@msgpack/msgpack/dist.esm/index.mjs",
                 "/src/no_such_folder/"):
        assert served.get(path).status == 404, path
    assert served.get("/web/", method="POST").status == 501  # http.server's answer to a method it has no do_ for


def test_a_learner_address_that_is_not_websocket_is_refused():
    done = subprocess.run([sys.executable, "-m", "rlinks_rllib", "web", "--port", "0", "--learner",
                           "tcp://127.0.0.1:5555"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "WebSocket only" in done.stderr, done.stderr


def test_a_js_dir_that_is_not_the_client_is_refused(tmp_path):
    done = subprocess.run([sys.executable, "-m", "rlinks_rllib", "web", "--port", "0", "--js-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "no web/index.html" in done.stderr, done.stderr


def test_learner_ws_allowed_origin_adds_to_the_configs_origins(tmp_path):
    from rlinks_rllib.cli import build_parser
    from rlinks_rllib.training.config_file import ConfigFileError, load_spec
    from rlinks_rllib.training.learner import LearnerOptions, _overrides

    args = build_parser().parse_args(["learner", "--config", "x", "--ws-allowed-origin", "http://127.0.0.1:8000",
                                      "--ws-allowed-origin", "http://a.example"])
    assert args.ws_allowed_origin == ["http://127.0.0.1:8000", "http://a.example"]
    config = (ROOT / "configs" / "ppo_cartpole.yaml").read_text()
    assert "ws_allowed_origins" not in config
    with_origins = tmp_path / "with_origins.yaml"
    with_origins.write_text(config.replace("rlinks:\n", 'rlinks:\n  ws_allowed_origins: ["http://a.example"]\n', 1))
    opts = LearnerOptions(config=str(with_origins), ws_allowed_origins=tuple(args.ws_allowed_origin))
    assert _overrides(opts, load_spec(with_origins))["rlinks"]["ws_allowed_origins"] == [
        "http://a.example", "http://127.0.0.1:8000"]
    plain = load_spec(ROOT / "configs" / "ppo_cartpole.yaml")
    assert _overrides(LearnerOptions(config="x", ws_allowed_origins=("http://b:1",)), plain)["rlinks"] == {
        "ws_allowed_origins": ["http://b:1"]}
    assert "ws_allowed_origins" not in _overrides(LearnerOptions(config="x"), plain)["rlinks"]
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(config.replace("rlinks:\n", 'rlinks:\n  ws_allowed_origins: "http://a.example"\n', 1))
    with pytest.raises(ConfigFileError, match="must be a list of origins"):
        _overrides(opts, load_spec(wrong))
