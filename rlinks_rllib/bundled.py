"""The files that ship inside the package: the learner configs and the dummy client.

In the source tree they stay where people look for them, ``configs/*.yaml``
and ``examples/dummy_cartpole_client.py`` at the repository root.
``pyproject.toml`` maps those two folders to the subpackages
``rlinks_rllib.configs`` and ``rlinks_rllib.examples``, so a wheel carries
them and an editable install (``make venv``) finds them where they are. A
source tree imported as it is (on ``PYTHONPATH``: a git worktree beside the
checkout that the editable install points at) uses its own two folders, so
it runs its own client and configs. This module is the one place that knows
that; it needs nothing beyond the standard library, so a client-only install
can use it.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["config_names", "bundled_config", "resolve_config", "dummy_client"]

_CONFIGS = f"{__package__}.configs"
_EXAMPLES = f"{__package__}.examples"
_DUMMY_CLIENT = "dummy_cartpole_client.py"
#: Where each subpackage's files are in a source tree, from its root.
_SOURCE_FOLDERS = {_CONFIGS: "configs", _EXAMPLES: "examples"}
_SOURCE_ROOT = Path(__file__).resolve().parent.parent


def _path(package: str, name: str = "") -> Path:
    """A bundled file (or the package's folder) as a real path on disk.

    Raises:
        RuntimeError: the package is not installed as files (imported from a zip).
    """
    if (_SOURCE_ROOT / "pyproject.toml").is_file():
        # A source tree. Its subpackages may resolve through an editable
        # install of another checkout; its own folders are the ones to use.
        source = _SOURCE_ROOT / _SOURCE_FOLDERS[package]
        return source / name if name else source
    found = resources.files(package)
    if name:
        found = found / name
    if not isinstance(found, Path):  # e.g. imported from a zip: nothing to hand a subprocess or a file reader
        raise RuntimeError(f"{package} is not installed as files on disk; reinstall rlinks-rllib with pip")
    return found


def config_names() -> list[str]:
    """The bundled configs, by the bare name ``rlinks learner --config`` accepts."""
    return sorted(p.stem for p in _path(_CONFIGS).iterdir() if p.suffix == ".yaml")


def bundled_config(name: str) -> Path:
    """The bundled config ``name`` (``ppo_cartpole`` or ``ppo_cartpole.yaml``).

    Raises:
        FileNotFoundError: no bundled config has that name; the message lists them.
    """
    stem = name.removesuffix(".yaml")
    if stem not in config_names():
        raise FileNotFoundError(f"no bundled config named {name!r}; bundled: {', '.join(config_names())}")
    return _path(_CONFIGS, f"{stem}.yaml")


def resolve_config(name_or_path: str) -> Path:
    """What ``--config`` means: a file that exists wins, else a bundled config's bare name.

    Raises:
        FileNotFoundError: neither; the one-line message lists the bundled names.
    """
    path = Path(name_or_path)
    if path.exists():
        return path
    if path.name == name_or_path and name_or_path.removesuffix(".yaml") in config_names():
        return bundled_config(name_or_path)
    raise FileNotFoundError(f"no config file {name_or_path!r} here, and no bundled config of that name "
                            f"(bundled, by bare name: {', '.join(config_names())})")


def dummy_client() -> Path:
    """The dummy CartPole client (``examples/dummy_cartpole_client.py`` in the source tree)."""
    return _path(_EXAMPLES, _DUMMY_CLIENT)
