"""The web game (``clients/js/web/``): a CartPole page that trains with ``rlinks learner`` over WebSocket.

The page is served by ``rlinks web`` as a user starts it (``clients/js``'s
sources as they are, through an import map), opened in headless Chromium
(Debian's ``chromium``, driven by ``puppeteer-core``: no browser is
downloaded), and connects to the learner's directory at ``ws://``; the
learner lets the page's origin in with ``--ws-allowed-origin``, the
command ``rlinks web`` prints. It trains
four carts until the config's target (``ppo_cartpole``: a mean return of
450), and the end is quiet: the page's console holds no reconnect line, no
"not acknowledged", no refused connection. The run is a head start
(``tests/head_start.py``): it trains beside the suite's other tests, on
the core they leave idle. Debian's ``chromium`` is
installed with apt where the suite runs as root (``system_packages.py``);
elsewhere, without it, the test skips with a line on the terminal, as it
does where Node is missing.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from harness import Cancelled
from system_packages import require_debian_packages
from test_js_client import PACKAGE, Learner, node_with_dependencies
from test_rlinks_web import RlinksWeb

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def chromium_path(purpose: str) -> str:
    """A Chromium on PATH: one already there, else Debian's ``chromium``, installed where the suite may.

    Skips (loudly, see :func:`require_debian_packages`) where it is missing and can't be installed.
    """
    found = next(filter(None, map(shutil.which, CHROMIUM_NAMES)), None)
    if found is None:
        require_debian_packages("chromium", purpose=purpose)
        found = next(filter(None, map(shutil.which, CHROMIUM_NAMES)), None)
    if found is None:
        pytest.skip(f"Debian's chromium is installed but none of {CHROMIUM_NAMES} is on PATH: {purpose} can't run")
    return found


#: The bound of the run from its start: PPO's 450 took 34 s of training (67 s with the learner's start and end)
#: alone; beside the suite's other tests, on the other core, it has room.
WEB_GAME_BOUND_S = 600


def _train_the_web_game(tmp_path: Path, cancelled: threading.Event) -> dict:
    """``rlinks web`` and ``rlinks learner`` as the README says, the page in headless Chromium, until PPO's target.

    A head start (tests/head_start.py): it trains beside the suite's other tests. Returns what the page
    reported (``train_headless.mjs``'s JSON), the return the learner reached and the seconds it took.
    """
    node = node_with_dependencies()
    chromium = chromium_path("the web game trained in headless Chromium")
    with RlinksWeb() as web, Learner(ROOT / "configs" / "ppo_cartpole.yaml", tmp_path,
                                     "--ws-allowed-origin", web.origin) as learner:
        # The URL rlinks web said to open, at the learner's port (0 here: any free one).
        url = web.url.replace("ws://127.0.0.1:5555", f"ws://{learner.address}") + "&envs=4&speed=25"
        started = time.monotonic()
        driver = subprocess.Popen([node, "web/train_headless.mjs", "--chromium", chromium, "--url", url,
                                   "--timeout", str(WEB_GAME_BOUND_S - 120)],
                                  cwd=PACKAGE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            while driver.poll() is None:  # it prints once, at the end: no pipe fills meanwhile
                if cancelled.is_set():
                    raise Cancelled("the web game's run was cancelled before the page's training ended")
                time.sleep(1)
            out, err = driver.communicate(timeout=60)
        finally:
            if driver.poll() is None:
                driver.send_signal(signal.SIGTERM)  # puppeteer closes its Chromium on SIGTERM
                try:
                    driver.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    driver.kill()
                    driver.communicate(timeout=10)
        assert out, err
        seconds = time.monotonic() - started
        return {"code": driver.returncode, "report": json.loads(out.strip().splitlines()[-1]),
                "reached": learner.wait(timeout=120), "seconds": seconds}


@pytest.mark.slow
@pytest.mark.head_start(_train_the_web_game, bound_s=WEB_GAME_BOUND_S)
@pytest.mark.timeout(WEB_GAME_BOUND_S + 300)
def test_the_web_game_trains_in_headless_chromium(head_start):
    config = yaml.safe_load((ROOT / "configs" / "ppo_cartpole.yaml").read_text())
    run = head_start
    report = run["report"]
    status = report["status"]
    assert run["code"] == 0 and status["state"] == "training_ended", json.dumps(report, indent=1)
    assert run["reached"] >= config["stop"]["reward"]
    assert status["delivery"]["stepsAcked"] > 0 and status["weightsSeqNo"] > 1
    # The normal end is quiet in the browser too (the client's warnings go to the console).
    noise = [line for line in report["console"]
             if any(word in line for word in ("reconnecting", "not acknowledged", "ERR_CONNECTION_REFUSED"))]
    assert not noise, noise
    print(f"the web game trained PPO CartPole to {run['reached']:.1f} in headless Chromium in "
          f"{run['seconds']:.0f} s ({status['steps']} env steps), beside the suite's other tests")
