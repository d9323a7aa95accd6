"""Shared fixtures, the ``long`` marker's rule, and the ``head_start`` runs' start and end."""

from __future__ import annotations

import pytest

from head_start import cancel_head_starts, head_start, start_head_starts  # noqa: F401 (head_start: a fixture)


def pytest_collection_modifyitems(config, items):
    """``long`` runs (training to the issues' full targets) only when asked for: ``make test-long``.

    They keep ``make test`` within its 25 minutes; the suite holds a shorter
    form of each (the same code to a nearer target).
    """
    if "long" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="a long run: make test-long (pytest -m long)")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)


def pytest_collection_finish(session):
    """Start the ``head_start`` runs of the tests this session will run (head_start.py)."""
    start_head_starts(session)


def pytest_sessionfinish(session):
    cancel_head_starts(session.config)


@pytest.fixture
def msgpack_numpy_patched(monkeypatch):
    """msgpack as ``msgpack_numpy.patch()`` leaves it, restored afterwards.

    RLlib calls that patch whenever it touches msgpack (its RLlink socket
    helpers, msgpack checkpoints), so any process that also runs RLlib sees
    it; code that must never unpickle has to be immune to it.
    """
    msgpack = pytest.importorskip("msgpack")
    msgpack_numpy = pytest.importorskip("msgpack_numpy")
    replacements = {
        "Packer": msgpack_numpy.Packer,
        "Unpacker": msgpack_numpy.Unpacker,
        "pack": msgpack_numpy.pack,
        "packb": msgpack_numpy.packb,
        "unpack": msgpack_numpy.unpack,
        "unpackb": msgpack_numpy.unpackb,
        "dump": msgpack_numpy.pack,
        "dumps": msgpack_numpy.packb,
        "load": msgpack_numpy.unpack,
        "loads": msgpack_numpy.unpackb,
    }
    for name, value in replacements.items():
        monkeypatch.setattr(msgpack, name, value)
    yield msgpack


@pytest.fixture(scope="session")
def ray_local():
    """One local Ray instance on loopback for every test that trains."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(num_cpus=4, include_dashboard=False, address="local", configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict[str, str]:
    """A test CA, a server and a client certificate (``test_auth_tls.make_certificates``), per test module."""
    import shutil

    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make test certificates")
    from test_auth_tls import make_certificates  # the project's one recipe for test certificates

    return make_certificates(tmp_path_factory.mktemp("certs"))
