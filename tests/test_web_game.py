"""The web game (``clients/js/web/``): a CartPole page that trains with ``rlinks learner`` over WebSocket.

The page is served by ``rlinks web`` as a user starts it (``clients/js``'s
sources as they are, through an import map), opened in headless Chromium
(Debian's ``chromium``, driven by ``puppeteer-core``: no browser is
downloaded), and connects to the learner's directory at ``ws://``; the
learner lets the page's origin in with ``--ws-allowed-origin``, the
command ``rlinks web`` prints. It trains
four carts until the config's target (``ppo_cartpole``: a mean return of
450). Skips, saying why, where Chromium or Node is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from test_js_client import PACKAGE, Learner, node  # noqa: F401  (the fixture: node, with clients/js's dependencies)
from test_rlinks_web import RlinksWeb

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


@pytest.fixture(scope="session")
def chromium() -> str:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path is not None:
            return path
    pytest.skip("Chromium is not installed (apt-get install chromium): the web game can't be trained in a browser")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_web_game_trains_in_headless_chromium(node, chromium, tmp_path):  # noqa: F811
    config = yaml.safe_load((ROOT / "configs" / "ppo_cartpole.yaml").read_text())
    with RlinksWeb() as web, Learner(ROOT / "configs" / "ppo_cartpole.yaml", tmp_path,
                                     "--ws-allowed-origin", web.origin) as learner:
        # The URL rlinks web said to open, at the learner's port (0 here: any free one).
        url = web.url.replace("ws://127.0.0.1:5555", f"ws://{learner.address}") + "&envs=4&speed=25"
        started = time.monotonic()
        driven = subprocess.run([node, "web/train_headless.mjs", "--chromium", chromium, "--url", url,
                                 "--timeout", "700"], cwd=PACKAGE, capture_output=True, text=True, timeout=780)
        reached = learner.wait(timeout=120)
    assert driven.stdout, driven.stderr
    report = json.loads(driven.stdout.strip().splitlines()[-1])
    status = report["status"]
    assert driven.returncode == 0 and status["state"] == "training_ended", json.dumps(report, indent=1)
    assert reached >= config["stop"]["reward"]
    assert status["delivery"]["stepsAcked"] > 0 and status["weightsSeqNo"] > 1
    print(f"the web game trained PPO CartPole to {reached:.1f} in headless Chromium in "
          f"{time.monotonic() - started:.0f} s ({status['steps']} env steps)")
