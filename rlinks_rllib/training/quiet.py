"""Keep the learner's output to what a person can act on: the known-harmless lines of Ray and RLlib, dropped by name.

Starting a learner printed some twenty lines before its first iteration, none
of them about the user's run: gymnasium's complaints about a debugging env
that importing RLlib builds, RLlib deprecating what RLlib itself calls, Ray
announcing its defaults. Each is listed below once, by exactly what
identifies it (a warning's category, module and message; a log record's
logger and the start of its message), with where it comes from. Nothing else
is touched: any other warning, every error, and anything rlinks says still
show.

:func:`install` drops them in this process: the learner calls it before it
imports RLlib. :func:`runtime_env` makes every Ray worker of the job call it
as it starts (``worker_process_setup_hook``): a runner's or a learner's
lines reach the driver through Ray's ``log_to_driver``, which can't filter,
so they are dropped where they are made.

One line is written by C++, to the process's stderr itself: Ray's core worker
warns that an actor with ``max_restarts`` has constructor arguments in the
object store, which RLlib does for every runner (it puts the config there
once for all of them). :func:`stderr_without_known_lines` passes the
process's stderr through a thread that drops :data:`KNOWN_STDERR_LINES` and
writes everything else on at once; the learner wraps the building of the
algorithm in it, where RLlib makes its runners.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
import threading
import warnings
from dataclasses import dataclass
from typing import Iterator

__all__ = ["KnownWarning", "KnownLogLine", "KNOWN_WARNINGS", "KNOWN_LOG_LINES", "KNOWN_STDERR_LINES",
           "STOPPING_LOG_LINES", "install", "install_stopping", "runtime_env", "stderr_without_known_lines"]

#: Ray's variable that carries a submitted job's config (its runtime env) to the driver.
_JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"
_SETUP_HOOK = "worker_process_setup_hook"


@dataclass(frozen=True)
class KnownWarning:
    """A Python warning that is harmless here.

    Attributes:
        category: its class.
        module: a regex the module it is attributed to must match whole.
        message: a regex its message must match from its start.
        source: where it comes from, for people.
    """

    category: type[Warning]
    module: str
    message: str
    source: str


@dataclass(frozen=True)
class KnownLogLine:
    """A log record that is harmless here.

    Attributes:
        logger: the logger's name, exactly.
        message: a regex the formatted message must match from its start.
        source: where it comes from, for people.
    """

    logger: str
    message: str
    source: str


#: Lines C++ code writes to the process's stderr itself (bytes, searched in each line).
KNOWN_STDERR_LINES: tuple[re.Pattern[bytes], ...] = (
    # Ray's core worker, as RLlib creates each runner with its config put in the object store.
    re.compile(rb"\] core_worker\.cc:\d+: Actor with class name: '\w+' and ID: '[0-9a-f]+' has constructor arguments "
               rb"in the object store and max_restarts > 0\. If the arguments in the object store go out of scope "
               rb"or are lost, the actor restart will fail\."),
)
#: Longest piece of a stderr line handled at once (a longer one passes on in pieces).
_MAX_LINE_BYTES = 65_536
#: How long leaving :func:`stderr_without_known_lines` waits for the lines still in the pipe.
_DRAIN_S = 5.0

_GYM_WARN = r"(\x1b\[\d+m)?WARN: "  # gymnasium colours its warnings
_DREAMER_DEBUG_ENV = "ray.rllib.algorithms.dreamerv3.utils.debugging, imported when RLlib registers its algorithms, " \
                     "makes and resets a CartPole whose Box bounds are float64"

KNOWN_WARNINGS: tuple[KnownWarning, ...] = (
    KnownWarning(UserWarning, r"gymnasium\.spaces\.box",
                 _GYM_WARN + r"Box low's precision lowered by casting to float32, current low\.dtype=float64",
                 _DREAMER_DEBUG_ENV),
    KnownWarning(UserWarning, r"gymnasium\.spaces\.box",
                 _GYM_WARN + r"Box high's precision lowered by casting to float32, current high\.dtype=float64",
                 _DREAMER_DEBUG_ENV),
    KnownWarning(UserWarning, r"gymnasium\.utils\.passive_env_checker",
                 _GYM_WARN + r"The obs returned by the `reset\(\)` method was expecting numpy array dtype to be "
                             r"float32, actual type: float64", _DREAMER_DEBUG_ENV),
    KnownWarning(UserWarning, r"gymnasium\.utils\.passive_env_checker",
                 _GYM_WARN + r"The obs returned by the `reset\(\)` method is not within the observation space\.",
                 _DREAMER_DEBUG_ENV),
)

KNOWN_LOG_LINES: tuple[KnownLogLine, ...] = (
    KnownLogLine("ray._private.authentication.authentication_token_setup",
                 r"Token authentication is enabled for this Ray cluster\. Set RAY_AUTH_MODE=disabled to opt out\.",
                 "ray.init of a local instance: token authentication is on by default (the opposite warning, "
                 "that a cluster runs without it, still shows)"),
    KnownLogLine("ray._private.worker", r"Started a local Ray instance\.$", "ray.init of a local instance"),
    KnownLogLine("ray.rllib.algorithms.algorithm_config",
                 r"You are running \w+ on the new API stack! This is the new default behavior for this algorithm\.",
                 "RLlib, for every algorithm on its new API stack, which is the one rlinks runs"),
    KnownLogLine("ray.rllib.algorithms.sac.sac",
                 r"You are running SAC on the new API stack! This is the new default behavior for this algorithm\.",
                 "RLlib's SAC says it again itself, twice, on the same new API stack"),
    KnownLogLine("ray._common.deprecation",
                 r"DeprecationWarning: `RLModule\(config=\[RLModuleConfig object\]\)` has been deprecated\.",
                 "RLlib's RLModule.__init__ makes an RLModuleConfig itself, for every module (driver, runners, "
                 "learners)"),
    KnownLogLine("ray.train.torch.config", r"Setting up process group for: ",
                 "Ray Train, on the first of several learners, at INFO"),
    KnownLogLine("ray.tune.trainable.trainable", r"Trainable\.setup took [\d.]+ seconds\. If your trainable is slow "
                 r"to initialize, consider setting reuse_actors=True", "Tune's advice for Tune's trials; no Tune here"),
    KnownLogLine("ray.tune.utils.util", r"Install gputil for GPU system monitoring\.$",
                 "Tune's system monitor, which an Algorithm starts; rlinks reads nothing from it"),
)


#: Said only because the learner ends RLlib's sampling loop on SIGTERM (training/sigterm.py): dropped from then on.
STOPPING_LOG_LINES: tuple[KnownLogLine, ...] = (
    KnownLogLine("ray.rllib.execution.rollout_ops", r"No samples returned from remote workers\.",
                 "synchronous_parallel_sample, as its round returns nothing once the learner stops it"),
)


class _DropKnown(logging.Filter):
    """Drops a logger's records whose message matches one of its known lines."""

    def __init__(self, patterns: list[str]) -> None:
        super().__init__()
        self._known = re.compile("|".join(f"(?:{p})" for p in patterns))

    def filter(self, record: logging.LogRecord) -> bool:
        return self._known.match(record.getMessage()) is None


def install() -> None:
    """Drop the known-harmless warnings and log lines in this process (again is harmless).

    Ray calls it in every worker of a job started with :func:`runtime_env`.
    """
    for known in KNOWN_WARNINGS:
        # Adding the same filter again moves it to the front; it is never listed twice.
        warnings.filterwarnings("ignore", message=known.message, category=known.category, module=known.module)
    by_logger: dict[str, list[str]] = {}
    for line in KNOWN_LOG_LINES:
        by_logger.setdefault(line.logger, []).append(line.message)
    for name, patterns in by_logger.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropKnown) for f in logger.filters):
            logger.addFilter(_DropKnown(patterns))


def install_stopping() -> None:
    """Drop :data:`STOPPING_LOG_LINES` in this process from now on (the learner, once SIGTERM came)."""
    for line in STOPPING_LOG_LINES:
        logging.getLogger(line.logger).addFilter(_DropKnown([line.message]))


def runtime_env() -> dict:
    """What ``ray.init(runtime_env=...)`` needs so every worker of the job calls :func:`install` as it starts.

    Empty when the submitted job's own runtime env has a setup hook already
    (Ray takes one, and the job's is the user's).
    """
    job = os.environ.get(_JOB_CONFIG_ENV)
    if job:
        try:
            theirs = (json.loads(job).get("runtime_env") or {}).get(_SETUP_HOOK)
        except (ValueError, AttributeError):
            theirs = True  # not what Ray writes: leave the job's runtime env to Ray alone
        if theirs:
            return {}
    return {_SETUP_HOOK: f"{__name__}.install"}


@contextlib.contextmanager
def stderr_without_known_lines() -> Iterator[None]:
    """While inside, this process's stderr (file descriptor 2) goes through a thread that drops :data:`KNOWN_STDERR_LINES`.

    Every other line is written to the real stderr as soon as it is whole,
    in order. On leaving, fd 2 is the real stderr again and the thread
    passes on what is left in the pipe (waited for ``_DRAIN_S`` at most; a
    process started inside that still holds the pipe keeps the thread
    passing its lines on).

    Raises:
        OSError: the file descriptors can't be duplicated (then nothing changed).
    """
    sys.stderr.flush()
    real = os.dup(2)
    try:
        read_end, write_end = os.pipe()
    except OSError:
        os.close(real)
        raise
    os.dup2(write_end, 2)
    os.close(write_end)
    thread = threading.Thread(target=_pass_on, args=(read_end, real), daemon=True, name="stderr-filter")
    thread.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(real, 2)  # fd 2 no longer holds the pipe: the thread reads to its end, then closes `real`
        thread.join(_DRAIN_S)


def _pass_on(read_end: int, real: int) -> None:
    """Copy the pipe's lines but the known ones to ``real`` until the pipe ends; then close ``real``.

    A write that fails (the real stderr was closed) stops the copying, not
    the reading, so no writer ever blocks on a full pipe.
    """
    writable = True
    with open(read_end, "rb") as pipe:
        while line := pipe.readline(_MAX_LINE_BYTES):
            if writable and not any(known.search(line) for known in KNOWN_STDERR_LINES):
                try:
                    _write_all(real, line)
                except OSError:
                    writable = False  # nothing can be shown any more; keep the pipe flowing
    os.close(real)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
