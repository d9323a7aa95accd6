"""Where the five-host harness can't make namespaces, its tests skip with a one-line reason.

``tests/test_multihost.py`` skips on ``multihost.skip_reason()``; this runs
that function in a child whose ``PATH`` has no ``ip``, so it stops at its
first checks (root, then ``ip``) and never makes a namespace.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="network namespaces need Linux")
def test_without_ip_the_reason_is_one_line():
    path = str(Path(sys.executable).parent)
    assert shutil.which("ip", path=path) is None
    probe = subprocess.run([sys.executable, "-c", "import multihost; print(multihost.skip_reason())"],
                           cwd=TESTS, env={**os.environ, "PATH": path}, capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    expected = "the 'ip' command (iproute2) is not installed" if os.geteuid() == 0 else "network namespaces need root"
    assert probe.stdout == expected + "\n"
