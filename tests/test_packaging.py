"""The package as the two machines install it: a wheel built from this checkout.

* A simulator machine runs ``pip install rlinks-rllib``: numpy, msgpack and
  websockets (pure Python), no Ray, torch or yaml; the bundled dummy client trains from there.
* A learner machine installs the ``rllib`` extra and runs ``rlinks demo`` in
  an empty folder: the configs and the dummy client come from the wheel.

Each install is a fresh venv that never sees this checkout. The learner's venv
borrows Ray and torch from the checkout's ``.venv`` instead of downloading
gigabytes again: a ``.pth`` file with a plain path line puts the ``.venv``'s
site-packages on ``sys.path`` without running the ``.pth`` files there (so
this checkout's editable-install finder stays off), and the test checks that
``rlinks_rllib`` does come from the new venv.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness import ROOT, ppo_config, running, train
from rlinks_rllib.server.env_runner import runner_addresses

CONSTRAINTS = ROOT / "constraints.txt"
#: Build outputs, caches and environments: never part of what the wheel is built from.
_NOT_SOURCE = {".git", ".venv", "__pycache__", "build", "dist", "runs", ".pytest_cache", ".hypothesis",
               ".fuzz-corpus", "out"}
#: Environment variables that would let a venv's Python see this checkout or another environment.
_LEAKY_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONUSERBASE")


@dataclass
class Built:
    wheel: Path
    source: Path  # the copy of the checkout it was built from


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Built:
    """The wheel, built once per session from a copy of this checkout.

    A copy, because pip builds a local folder in place: setuptools would leave
    ``build/`` and ``*.egg-info`` in the checkout (and pack stale files from an
    old ``build/lib`` into later wheels).
    """
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    shutil.copytree(ROOT, source,
                    ignore=lambda _, names: [n for n in names if n in _NOT_SOURCE or n.endswith(".egg-info")])
    dist = work / "dist"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(dist), str(source)],
        capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    wheel, = dist.glob("rlinks_rllib-*.whl")
    return Built(wheel, source)


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _LEAKY_ENV}


def _make_venv(path: Path) -> Path:
    """A fresh venv; returns its python. pip comes from the checkout's venv (``pip --python``)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120,
                   env=_clean_env())
    return path / "bin" / "python"


def _pip_install(python: Path, *args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", *args],
                            capture_output=True, text=True, timeout=300, env=_clean_env())
    assert result.returncode == 0, result.stdout + result.stderr


def _run(cmd: list, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=_clean_env())


def _site_packages(python: Path) -> Path:
    return Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=python.parent)
                .stdout.strip())


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGKILL what is left of a process group this test started (its own session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


_PROBE = """
import importlib.util, sys
import rlinks_rllib.client
for name in ("ray", "torch", "yaml", "gymnasium"):
    print(name, importlib.util.find_spec(name) is not None)
print("rlinks_rllib", rlinks_rllib.client.__file__)
"""


def _probe(python: Path, cwd: Path) -> dict[str, str]:
    result = _run([python, "-c", _PROBE], cwd=cwd)
    assert result.returncode == 0, result.stderr
    return dict(line.split(" ", 1) for line in result.stdout.splitlines())


def test_a_source_tree_runs_its_own_configs_and_dummy_client():
    """A checkout imported as it is (a worktree on PYTHONPATH, beside an editable install of
    another checkout) hands out its own files, not those the editable install maps to."""
    from rlinks_rllib import bundled

    assert bundled.dummy_client() == ROOT / "examples" / "dummy_cartpole_client.py"
    assert bundled.bundled_config("ppo_cartpole") == ROOT / "configs" / "ppo_cartpole.yaml"
    assert bundled.config_names() == sorted(p.stem for p in (ROOT / "configs").glob("*.yaml"))


@pytest.mark.timeout(300)
def test_the_wheel_holds_configs_and_dummy_client_and_needs_only_numpy_msgpack_and_websockets(built):
    with zipfile.ZipFile(built.wheel) as wheel:
        names = set(wheel.namelist())
        metadata, = [n for n in names if n.endswith(".dist-info/METADATA")]
        requires = [line.split(":", 1)[1].strip() for line in wheel.read(metadata).decode().splitlines()
                    if line.startswith("Requires-Dist:")]
    configs = sorted((built.source / "configs").glob("*.yaml"))
    assert configs, "no configs to bundle"
    assert {f"rlinks_rllib/configs/{c.name}" for c in configs} <= names
    assert "rlinks_rllib/examples/dummy_cartpole_client.py" in names
    assert not [n for n in names if "/cluster/" in n], "examples/cluster/ does not ship"
    # pyproject.toml lists the packages by hand: a new subpackage must not be left out.
    modules = {p.relative_to(built.source).as_posix() for p in (built.source / "rlinks_rllib").rglob("*.py")}
    assert modules <= names, f"missing from the wheel: {sorted(modules - names)}"
    base = [r for r in requires if "extra ==" not in r]
    assert sorted(re.match(r"[A-Za-z0-9._-]+", r).group(0).lower() for r in base) == ["msgpack", "numpy", "websockets"], base
    assert any(r.startswith("ray[rllib]") and 'extra == "rllib"' in r for r in requires), requires


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_client_only_install_trains_against_a_runner(built, tmp_path, ray_local):
    """``pip install rlinks-rllib`` on a simulator machine: no Ray, and the bundled dummy client trains."""
    python = _make_venv(tmp_path / "client-venv")
    rlinks = python.parent / "rlinks"
    empty = tmp_path / "empty"
    empty.mkdir()
    _pip_install(python, "-c", CONSTRAINTS, built.wheel)
    found = _probe(python, empty)
    assert found == {"ray": "False", "torch": "False", "yaml": "False", "gymnasium": "False",
                     "rlinks_rllib": found["rlinks_rllib"]}, found
    assert found["rlinks_rllib"].startswith(str(tmp_path / "client-venv")), found

    config = ppo_config(num_env_runners=0, train_batch=500, num_epochs=2, env_config={"host": "127.0.0.1"})
    with running(config.build_algo()) as algo:
        (_, host, port), = runner_addresses(algo)
        assert host == "127.0.0.1"
        client = subprocess.Popen([str(rlinks), "client", "--address", f"{host}:{port}", "-n", "1"],
                                  cwd=empty, env=_clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, start_new_session=True)
        try:
            results = train(algo, 3)
            stats = algo.env_runner_group.local_env_runner.get_transport_stats()
            # Stopping the algorithm (leaving `running`) tells the client the learner is done.
        except BaseException:
            _stop_group(client)
            raise
    try:
        out, _ = client.communicate(timeout=60)
    finally:
        _stop_group(client)
    assert client.returncode == 0, out
    summary = re.search(r"\[client 0\] summary: steps=(\d+)", out)
    assert summary, out
    sampled = results[-1]["env_runners"]["num_env_steps_sampled_lifetime"]
    assert sampled >= 3 * 500
    assert int(summary.group(1)) >= stats["steps_in"] >= sampled, (summary.group(0), stats)
    first, last = (r["env_runners"]["rlinks"] for r in (results[0], results[-1]))
    # Every batch was sampled with the weights the runner held when it took it (lag 0),
    # and by the last iteration those were newer than the first: the client got them.
    assert last["policy_lag_max"] == 0, last
    assert last["weights_seq_no"] > first["weights_seq_no"], (first, last)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_full_install_runs_the_demo_in_an_empty_folder(built, tmp_path):
    """The wheel with the learner's dependencies: ``rlinks demo`` needs nothing from this checkout."""
    venv = tmp_path / "learner-venv"
    python = _make_venv(venv)
    rlinks = python.parent / "rlinks"
    _pip_install(python, "--no-deps", built.wheel)
    # Borrow Ray, torch & co. from the checkout's venv: a plain path line, processed after the
    # venv's own site-packages, and without the .pth files there (the editable finder among them).
    (_site_packages(python) / "_borrow_learner_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    empty = tmp_path / "empty"
    empty.mkdir()

    where = _run([python, "-c", "import ray, torch, rlinks_rllib.bundled as b; "
                                "print(b.__file__); print(b.resolve_config('ppo_cartpole')); "
                                "print(b.resolve_config('ppo_cartpole.yaml')); print(b.dummy_client())"], cwd=empty)
    assert where.returncode == 0, where.stderr
    paths = where.stdout.split()
    assert len(paths) == 4 and all(p.startswith(str(venv)) for p in paths), paths
    assert paths[1] == paths[2] and paths[1].endswith("ppo_cartpole.yaml")
    unknown = _run([rlinks, "learner", "--config", "ppo_cartpol"], cwd=empty)
    assert unknown.returncode == 1 and len(unknown.stderr.strip().splitlines()) == 1, unknown.stderr
    assert "ppo_cartpole" in unknown.stderr and "appo_cartpole" in unknown.stderr

    # The demo starts its own Ray; its own session, so whatever it leaves behind is killed with it.
    demo = subprocess.Popen([str(rlinks), "demo", "--port", "0"], cwd=empty, env=_clean_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = demo.communicate(timeout=420)
    finally:
        _stop_group(demo)
    assert demo.returncode == 0, out[-3000:]
    assert "done: mean return" in out and out.count("summary: steps=") == 4, out[-3000:]
    rows = list(csv.DictReader(open(empty / "runs" / "demo" / "progress.csv")))
    assert float(rows[-1]["episode_return_mean"]) >= 450
    assert (empty / "runs" / "demo" / "learning_curve.png").stat().st_size > 1000
