"""Shared fixtures."""

from __future__ import annotations

import pytest


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
