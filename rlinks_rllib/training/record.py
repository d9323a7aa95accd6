"""``rlinks record``: runners take simulators and record what they send; nothing is trained.

The config's runners are built as ``rlinks learner`` builds them, with
``record_dir`` set, but no Learner update ever runs: the driver only calls each
runner's ``sample()`` (which hands the steps to its recorder) and drops what it
returns. Clients play the weights the runners start with: the module's
initial ones, or a checkpoint's (``--resume``); a client that picks its own
actions (``log_action``: a scripted controller, a person) is recorded as it
plays. On-policy clients wait for new weights after each share they send, so
after each round the runners publish the same weights as a new version.

It ends after ``--stop-steps`` env steps, on Ctrl-C, or on SIGTERM, after the
round under way; the runners then finish their files, so the recording is
whole.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from . import quiet
from .config_file import ConfigFileError, build_algorithm_config, load_spec
from .learner import _init_ray, announce_runners
from .offline import is_offline
from .sigterm import sigterm_sets

__all__ = ["RecordOptions", "run_record"]

#: Seconds between two progress lines.
_REPORT_EVERY_S = 5.0


@dataclass
class RecordOptions:
    """Everything ``rlinks record`` takes; ``None`` means "as the config file says"."""

    config: str
    out: str
    host: Optional[str] = None
    port: Optional[int] = None
    num_env_runners: Optional[int] = None
    resume: Optional[str] = None
    stop_steps: Optional[int] = None
    output: str = "runs/record"


def _record_round(runner) -> int:
    """On a runner: one ``sample()`` (recorded by the runner itself); the env steps it took.

    An on-policy runner's clients wait for new weights after their share,
    so the same weights go out again as the next version.
    """
    from ray.rllib.core import COMPONENT_RL_MODULE
    from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO

    steps = sum(len(episode) for episode in runner.sample())
    runner.get_metrics()  # reduce what sample() logged, so nothing piles up between rounds
    if runner.on_policy:
        seq_no = runner.get_state(not_components=COMPONENT_RL_MODULE)[WEIGHTS_SEQ_NO] + 1
        runner.set_state({COMPONENT_RL_MODULE: runner.module.get_state(), WEIGHTS_SEQ_NO: seq_no})
    return steps


def _each_runner(algo, fn: Callable):
    group = algo.env_runner_group
    return group.foreach_env_runner(fn, local_env_runner=group.num_remote_env_runners() == 0)


def _progress(algo, steps: int) -> str:
    stats = [s for s in _each_runner(algo, lambda runner: runner.get_transport_stats()) if s]
    total = {key: sum(s.get(key, 0) for s in stats)
             for key in ("record_steps", "record_files", "record_bytes", "record_dropped_steps", "clients_connected")}
    return (f"recorded {total['record_steps']:,d} of {steps:,d} env steps | {total['record_files']} files, "
            f"{total['record_bytes'] / 1e6:.1f} MB | clients {total['clients_connected']}"
            + (f" | not recorded {total['record_dropped_steps']:,d}" if total["record_dropped_steps"] else ""))


def run_record(
    opts: RecordOptions,
    *,
    on_ready: Optional[Callable] = None,
    print_fn: Callable[[str], None] = print,
) -> int:
    """Record until ``stop_steps`` env steps, Ctrl-C or SIGTERM; returns 0.

    Args:
        opts: what to run.
        on_ready: as for :func:`~.learner.run_learner`: called once the runners listen.
        print_fn: where progress goes.

    Raises:
        ConfigFileError: the config is invalid, multi-agent, or trains offline itself.
    """
    quiet.install()
    spec = load_spec(opts.config)
    if spec.multi_agent:
        raise ConfigFileError(f"{spec.path}: rlinks record takes a single-agent config (RLlib's offline data "
                              "holds single-agent episodes)")
    out = str(Path(opts.out).resolve())
    rlinks = {"record_dir": out, **{k: v for k, v in (("host", opts.host), ("port", opts.port)) if v is not None}}
    env_runners = {} if opts.num_env_runners is None else {"num_env_runners": opts.num_env_runners}
    config = build_algorithm_config(spec, overrides={"rlinks": rlinks, "env_runners": env_runners})
    if is_offline(config):
        raise ConfigFileError(f"{spec.path}: reads a recording (offline_data.input_); rlinks record needs a config "
                              "whose runners take simulators")
    from ray.rllib.callbacks.callbacks import RLlibCallback

    # Nothing trains, so no sample() result is dropped on its way: no receipts, no shares.
    config.callbacks(RLlibCallback)
    output = Path(opts.output).resolve()
    output.mkdir(parents=True, exist_ok=True)

    _init_ray(config)
    with quiet.stderr_without_known_lines():
        algo = config.build_algo()
    directory = None
    steps = 0
    try:
        if opts.resume:
            algo.restore_from_path(str(Path(opts.resume).resolve()))
            print_fn(f"clients play the weights of {opts.resume}")
        print_fn(f"recording to {out} (no training)")
        _, directory = announce_runners(algo, output, on_ready, print_fn)
        stopped = threading.Event()
        reported = time.monotonic()
        with sigterm_sets(stopped):
            try:
                while not stopped.is_set() and (opts.stop_steps is None or steps < opts.stop_steps):
                    steps += sum(_each_runner(algo, _record_round))
                    if time.monotonic() - reported >= _REPORT_EVERY_S:
                        reported = time.monotonic()
                        print_fn(_progress(algo, steps))
            except KeyboardInterrupt:
                print_fn("interrupted")
        print_fn(_progress(algo, steps))
    finally:
        if directory is not None:
            directory.stop()
        algo.stop()  # each runner finishes its files
    print_fn(f"done: {steps:,d} env steps recorded to {out}")
    return 0
