"""Debian packages a test needs (a C# compiler, the Godot engine, Chromium), installed where the suite may.

``make test`` builds the C++ client itself; in the same spirit it installs
the few system programs its other clients are tested with, so a fresh
machine tests what the README says it does instead of skipping it. It does
so only where it can: as root, with ``apt-get``. Anywhere else the test is
skipped with a line that names the packages and the command that brings
them, also printed to the terminal, so a skip is never silent.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading

import pytest

__all__ = ["require_debian_packages"]

#: How long one ``apt-get`` call may take (a cold ``chromium`` is about 100 MB).
APT_TIMEOUT_S = 900
#: How long to wait for another apt or dpkg (e.g. a second test session) to let go of its lock.
LOCK_TIMEOUT_S = 300

_lock = threading.Lock()
_updated = False


def _missing(packages: tuple[str, ...]) -> list[str]:
    missing = []
    for package in packages:
        status = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True,
                                timeout=60)
        if status.returncode != 0 or "install ok installed" not in status.stdout:
            missing.append(package)
    return missing


def _apt(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(["apt-get", "-o", f"DPkg::Lock::Timeout={LOCK_TIMEOUT_S}", *args], capture_output=True,
                          text=True, timeout=APT_TIMEOUT_S, env=env)


def _skip_loudly(reason: str) -> None:
    print(f"\n*** SKIPPED: {reason}", file=sys.__stderr__, flush=True)
    pytest.skip(reason)


def require_debian_packages(*packages: str, purpose: str) -> None:
    """Make sure Debian's ``packages`` are installed, installing them with apt where this runs as root.

    Args:
        packages: Debian package names, e.g. ``"mono-mcs", "mono-runtime"``.
        purpose: what the test does with them, for the skip line.

    Skips the calling test (``pytest.skip``, with a line on the terminal)
    where they are missing and can't be installed: not root, no
    ``apt-get`` or ``dpkg-query``, or apt failed (its last lines are in the
    reason). Never fails the test for a machine it can't change.
    """
    global _updated
    command = f"apt-get install {' '.join(packages)}"
    if shutil.which("dpkg-query") is None or shutil.which("apt-get") is None:
        _skip_loudly(f"not a Debian machine (no apt-get): {purpose} needs {command}")
    with _lock:
        missing = _missing(packages)
        if not missing:
            return
        if os.geteuid() != 0:
            _skip_loudly(f"{', '.join(missing)} not installed and this is not root: {purpose} needs {command}")
        print(f"\n--- installing {' '.join(missing)} with apt-get for {purpose}", file=sys.__stderr__, flush=True)
        if not _updated:
            updated = _apt("update")
            if updated.returncode != 0:
                _skip_loudly(f"apt-get update failed ({updated.stderr.strip()[-400:]}): {purpose} needs {command}")
            _updated = True
        installed = _apt("install", "-y", "--no-install-recommends", *missing)
        if installed.returncode != 0:
            _skip_loudly(f"{command} failed ({installed.stderr.strip()[-400:]}): {purpose} can't run here")
        still = _missing(packages)
        if still:
            _skip_loudly(f"apt-get said it installed {', '.join(still)}, dpkg says not: {purpose} can't run here")
