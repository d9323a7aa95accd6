"""``rlinks learner``: build the algorithm, tell simulators where to go, train, report.

:func:`run_learner` is what the command line calls and what ``rlinks demo``
and the cluster example call too. It returns an exit code: 0 when the stop
reward was reached (or none was set), 2 when the iteration cap came first.
"""

from __future__ import annotations

import atexit
import gc
import logging
import math
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from . import quiet
from .config_file import ConfigFileError, build_algorithm_config, load_spec
from .files import write_json_whole
from .offline import check_inputs, close_reader, cpus_for_reading, is_offline, quiet_reading, result_for_report
from .report import drop_advice, format_return, format_row, plot_curve, row_from_result, write_csv
from .sigterm import StoppedWaiting, sigterm_sets
from .tensorboard import TensorBoardLog
from .timings import IterationTimes

__all__ = ["LearnerOptions", "run_learner", "announce_runners", "EXIT_OK", "EXIT_TARGET_MISSED", "EXIT_TERMINATED"]

logger = logging.getLogger("rlinks_rllib.learner")

EXIT_OK = 0
EXIT_TARGET_MISSED = 2
#: Stopped by SIGTERM (``ray job stop``) after finishing the iteration under way and checkpointing.
EXIT_TERMINATED = 128 + signal.SIGTERM


@dataclass
class LearnerOptions:
    """Everything ``rlinks learner`` takes; ``None`` means "as the config file says"."""

    config: str
    host: Optional[str] = None
    port: Optional[int] = None
    num_env_runners: Optional[int] = None
    gpu_num: Optional[int] = None
    num_learners: Optional[int] = None
    stop_reward: Optional[float] = None
    stop_iters: Optional[int] = None
    checkpoint_every: int = 0
    output: str = "runs/latest"
    resume: Optional[str] = None
    #: A recording to train from (an offline algorithm's ``offline_data.input_``).
    input: Optional[str] = None
    #: Web page origins let in over WebSocket on top of the config's ``rlinks.ws_allowed_origins``.
    ws_allowed_origins: tuple[str, ...] = ()


def _overrides(opts: LearnerOptions, spec: Any) -> dict:
    rlinks = {k: v for k, v in (("host", opts.host), ("port", opts.port)) if v is not None}
    if opts.ws_allowed_origins:
        # --ws-allowed-origin adds to the config's list rather than replacing it.
        configured = spec.rlinks.get("ws_allowed_origins") or []
        if not isinstance(configured, list):
            raise ConfigFileError(f"{spec.where('rlinks', 'ws_allowed_origins')}: rlinks.ws_allowed_origins must be "
                                  f"a list of origins, got {configured!r}")
        rlinks["ws_allowed_origins"] = [*configured, *(o for o in opts.ws_allowed_origins if o not in configured)]
    env_runners = {} if opts.num_env_runners is None else {"num_env_runners": opts.num_env_runners}
    learners: dict = {}
    if opts.gpu_num is not None:
        # N learners with one GPU each; 0 keeps the learners on the CPU.
        learners = {"num_learners": opts.gpu_num, "num_gpus_per_learner": 1 if opts.gpu_num else 0}
    if opts.num_learners is not None:
        learners["num_learners"] = opts.num_learners
    offline_data = {} if opts.input is None else {"input_": opts.input}
    return {"rlinks": rlinks, "env_runners": env_runners, "learners": learners, "offline_data": offline_data}


def _logical_cpus(config) -> int:
    """CPUs the algorithm's actors ask Ray for (Ray counts them, it doesn't pin them)."""
    def cpus(value) -> float:
        return float(value) if isinstance(value, (int, float)) and value else 1.0  # RLlib allows "auto"

    runners = int(config.num_env_runners or 0) * cpus(config.num_cpus_per_env_runner)
    learners = max(1, int(config.num_learners or 0)) * cpus(config.num_cpus_per_learner)
    aggregators = int(getattr(config, "num_aggregator_actors_per_learner", 0) or 0) * max(1, int(config.num_learners or 0))
    return int(runners + learners + aggregators) + cpus_for_reading(config) + 1


def _init_ray(config) -> None:
    import ray

    if ray.is_initialized():
        return
    # Every worker drops the known-harmless lines too (quiet.py), before RLlib says them.
    workers = quiet.runtime_env() or None
    if os.environ.get("RAY_ADDRESS"):
        ray.init(runtime_env=workers)  # inside `ray job submit`, or pointed at a cluster on purpose
    else:
        # A fresh local instance (never attach to a stale address file), with
        # enough logical CPUs for every actor the config asks for: on a laptop
        # they share the cores rather than wait forever for free ones.
        ray.init(address="local", include_dashboard=False,
                 num_cpus=max(os.cpu_count() or 1, _logical_cpus(config)), runtime_env=workers)


def _local_learner_threads(config) -> None:
    """Give torch in this process the CPU threads a remote learner would get: ``num_cpus_per_learner``.

    A remote learner is a Ray actor, which Ray starts with
    ``OMP_NUM_THREADS`` set to its CPUs (1 by RLlib's default). The local
    learner (``num_learners: 0``) runs here instead, where torch would take
    every core and spin-wait on them, against the runner, Ray and the
    simulators on the same machine: a small SAC update took 39 ms instead of
    0.5 ms on two busy cores. ``OMP_NUM_THREADS`` set by the user wins.
    """
    if (config.num_learners or 0) > 0 or os.environ.get("OMP_NUM_THREADS"):
        return
    import torch

    wanted = config.num_cpus_per_learner
    threads = int(wanted) if isinstance(wanted, (int, float)) and wanted >= 1 else 1
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
        logger.debug("local learner: %d torch thread(s) (learners.num_cpus_per_learner)", threads)


#: How long the learner waits for its runners to say where they are and how busy (one may be cut off).
_ASK_RUNNERS_TIMEOUT_S = 10.0


def _live_runners(algo) -> list:
    """Every runner that answered: where it listens now and how many clients it has.

    Asked after every iteration, since RLlib may have restarted a runner on
    another node (a new address), and a runner that is down or cut off (no
    answer within the timeout) must not be handed to simulators.
    """
    from ..server.network.directory import Endpoint

    def describe(runner):
        address = runner.get_address()
        stats = runner.get_transport_stats()
        return None if address is None else Endpoint(runner.worker_index, address[0], address[1],
                                                     stats.get("clients_connected", 0), stats.get("quiet_s", 0.0))

    group = algo.env_runner_group
    if group.num_remote_env_runners() == 0:
        found = [describe(group.local_env_runner)]
    else:
        found = group.foreach_env_runner(describe, local_env_runner=False, timeout_seconds=_ASK_RUNNERS_TIMEOUT_S)
    return sorted((e for e in found if e is not None), key=lambda e: e.worker_index)


#: Seconds between two looks for a simulator while IMPALA or APPO waits for one (:func:`_wait_for_simulators`).
_SIMULATOR_POLL_S = 1.0


def _simulators_silent(runners: list) -> bool:
    """Whether no step can come: no runner has a client, or every runner that has one is quiet (``quiet_s``).

    A runner is quiet once a ``sample()`` came back with nothing and no
    step came since: its simulators are connected but silent (a game
    paused, a robot waiting for a reset, a debugger's breakpoint).
    """
    return all(endpoint.quiet_s > 0 for endpoint in runners if endpoint.clients)


def _wait_for_simulators(algo, directory, terminated: threading.Event, print_fn: Callable[[str], None]) -> bool:
    """Hold IMPALA's or APPO's next iteration until a simulator sends steps; ``False`` on SIGTERM.

    Asked only when the runners had no simulator, or only silent ones,
    after the last iteration (or before the first).

    They count every ``sample()`` result as a rollout fragment and pack ten
    or so into one update without looking into them. With no simulator, or
    only silent ones, every result is empty (a runner waits at most a few
    seconds for a first step, see ``server/env_runner.py``), and a pack of
    empty results fails RLlib's learner (``IndexError`` in
    ``AddOneTsToEpisodesAndTruncate``): the learner died some 25 s after
    its last simulator left, and a remote learner's update failed so once
    connected simulators had been silent for ten empty results (some 25 s
    at a ``sample_timeout_s`` of 6 s, four minutes at RLlib's 60 s). So
    between iterations, while no step can come, nothing is sampled.
    """
    said = None  # what the learner last said it waits for
    while not terminated.is_set():
        runners = _live_runners(algo)
        if directory is not None:
            directory.update(runners)
        connected = [endpoint for endpoint in runners if endpoint.clients]
        if not _simulators_silent(runners):
            if said == "silent":
                print_fn("the simulators send steps again: training goes on")
            elif said is not None:
                print_fn("a simulator connected: training goes on")
            return True
        name = algo.config.algo_class.__name__
        if not connected and said != "none":
            print_fn(f"no simulator connected: {name} waits for one before its next iteration")
            said = "none"
        elif connected and said != "silent":
            quiet_s = min(endpoint.quiet_s for endpoint in connected)
            print_fn(f"{sum(e.clients for e in connected)} simulator(s) connected but silent for {quiet_s:.0f} s: "
                     f"{name} waits for their steps before its next iteration")
            said = "silent"
        terminated.wait(_SIMULATOR_POLL_S)
    return False


def _start_directory(algo, addresses: list[tuple[int, str, int]], print_fn: Callable[[str], None]):
    """The one address for simulators, on the base port, when there are remote runners."""
    from ..server.network.directory import Directory, Endpoint
    from ..server.settings import RLinkSettings

    if algo.env_runner_group.num_remote_env_runners() == 0:
        return None
    # The runners' own settings: the same host, TLS certificate and secret guard this port too.
    directory = Directory.from_settings(RLinkSettings.from_env_config(algo.config.env_config)).start()
    directory.update([Endpoint(i, h, p) for i, h, p in addresses])
    host, port = directory.address
    if host in ("0.0.0.0", "::"):
        import ray

        host = ray.util.get_node_ip_address()
    directory.public_address = (host, port)
    print_fn(f"simulators connect to {host}:{port} (picks the least-loaded runner), or to a runner directly:")
    return directory


def _note_moves(addresses: list[tuple[int, str, int]], runners: list, output: Path,
                print_fn: Callable[[str], None]) -> None:
    """Say so (and rewrite endpoints.json) when a runner came back somewhere else."""
    known = {i: (h, p) for i, h, p in addresses}
    moved = [e for e in runners if known.get(e.worker_index, (e.host, e.port)) != (e.host, e.port)]
    for e in moved:
        print_fn(f"  runner {e.worker_index} moved: {e.host}:{e.port}")
        addresses[:] = [(i, h, p) if i != e.worker_index else (i, e.host, e.port) for i, h, p in addresses]
    if moved:
        _write_endpoints(output, addresses)


def _write_endpoints(output: Path, addresses: list[tuple[int, str, int]]) -> None:
    write_json_whole(output / "endpoints.json", [{"worker_index": i, "host": h, "port": p} for i, h, p in addresses])


def announce_runners(algo, output: Path, on_ready: Optional[Callable], print_fn: Callable[[str], None]):
    """Start the directory, say where simulators connect, write ``endpoints.json`` (and ``directory.json``).

    Returns every runner's ``(worker_index, host, port)`` and the directory
    (``None`` without remote runners), after calling ``on_ready`` with them.
    """
    from ..server.env_runner import runner_addresses

    addresses = runner_addresses(algo)
    directory = _start_directory(algo, addresses, print_fn)
    if directory is None:
        print_fn("simulators connect to:")
    if directory is not None:
        host, port = directory.public_address
        write_json_whole(output / "directory.json", {"host": host, "port": port}, indent=None)
    _write_endpoints(output, addresses)  # last: once it is there, so is directory.json (if there is a directory)
    for index, host, port in addresses:
        print_fn(f"  runner {index}: {host}:{port}")
    if on_ready is not None:
        on_ready(addresses, directory.public_address if directory is not None else None)
    return addresses, directory


def _exit_without_final_collection() -> None:
    """At the process's exit, skip the garbage collection of everything torch, Ray and RLlib left behind.

    Python collects the whole object graph once more as it exits: 3.5 s of a
    SAC learner's 5.6 s from SIGTERM to exit on two cores (checkpoint and
    ``algo.stop()`` 0.15 s, ``ray.shutdown()`` 1.4 s), and 11 s beside four
    other learners, past the 10 s a stop has. Freezing the objects at exit
    leaves them to the OS, as for any process that ends. Registered once;
    in a process that goes on (a test calling :func:`run_learner`) it runs
    only when that process ends too.
    """
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)


def run_learner(
    opts: LearnerOptions,
    *,
    on_ready: Optional[Callable[[list[tuple[int, str, int]], Optional[tuple[str, int]]], None]] = None,
    print_fn: Callable[[str], None] = print,
) -> int:
    """Train until the stop reward or the iteration cap; write checkpoint, CSV and curve.

    Args:
        opts: what to run.
        on_ready: called with every runner's ``(worker_index, host, port)``
            and the directory's ``(host, port)`` (``None`` without remote
            runners) once they listen; the demo starts its clients there.
        print_fn: where the live view goes.

    Raises:
        ConfigFileError: the config file or an override is invalid.
    """
    quiet.install()  # before RLlib is imported: it warns as it loads
    _exit_without_final_collection()
    spec = load_spec(opts.config)
    config = build_algorithm_config(spec, overrides=_overrides(opts, spec))
    stop_reward = opts.stop_reward if opts.stop_reward is not None else spec.stop.get("reward")
    stop_iters = opts.stop_iters if opts.stop_iters is not None else int(spec.stop.get("iters", 100))
    output = Path(opts.output).resolve()
    output.mkdir(parents=True, exist_ok=True)
    offline = is_offline(config)
    inputs = check_inputs(config) if offline else []

    _init_ray(config)
    _local_learner_threads(config)
    if offline:
        quiet_reading()
    with quiet.stderr_without_known_lines():  # where RLlib makes its runners (Ray's C++ warns then)
        algo = config.build_algo()
    directory = None
    stop_signal = None
    try:
        stop_signal = _watch_stop_signal(algo)
        if opts.resume:
            algo.restore_from_path(str(Path(opts.resume).resolve()))
            print_fn(f"resumed from {opts.resume}")
        if offline:
            addresses = []
            print_fn(f"{spec.algorithm} learner ready, training from {', '.join(inputs)}")
        else:
            print_fn(f"{spec.algorithm} learner ready")
            addresses, directory = announce_runners(algo, output, on_ready, print_fn)

        rows: list[dict] = []
        terminated = threading.Event()
        with sigterm_sets(terminated, algo, stop_signal):
            rows = _train(algo, opts, rows, directory, addresses, output, stop_reward, stop_iters, terminated,
                          print_fn)
        reached = stop_reward is None or bool(rows) and rows[-1]["episode_return_mean"] >= stop_reward
        algo.save_to_path(str(output / "checkpoint"))
        if rows:
            plot_curve(rows, output / "learning_curve.png", target=stop_reward,
                       title=f"{spec.algorithm} via rlinks-rllib ({Path(spec.path).name})")
        # The last iteration may have ended no episode (NaN): the last mean that exists.
        last = next((r["episode_return_mean"] for r in reversed(rows) if math.isfinite(r["episode_return_mean"])),
                    math.nan)
        shown = format_return(last, stop_reward)  # the digits the stop reward's scale needs
        if terminated.is_set():
            print_fn(f"terminated (SIGTERM) after {len(rows)} iterations, mean return {shown}; "
                     f"checkpoint in {output / 'checkpoint'}")
            return EXIT_TERMINATED
        if reached:
            print_fn(f"done: mean return {shown} after {len(rows)} iterations; results in {output}")
            return EXIT_OK
        print_fn(f"stopped: mean return {shown} < target {stop_reward:g} after {stop_iters} iterations; "
                 f"results in {output}")
        return EXIT_TARGET_MISSED
    finally:
        if directory is not None:
            directory.stop()
        close_reader(algo)
        if stop_signal is not None:
            from ..server.stop_signal import set_signal

            set_signal(stop_signal)  # the runners' threads watching it end before the runners do
        algo.stop()


#: How long the learner waits for its runners to take its stop signal.
_STOP_SIGNAL_TIMEOUT_S = 30.0


def _watch_stop_signal(algo) -> Any:
    """Make the learner's stop signal and have every remote runner watch it (server/stop_signal.py); None without
    remote runners (the driver's own runner is told directly)."""
    from ..server.stop_signal import make_stop_signal

    group = algo.env_runner_group
    if group is None or group.num_remote_env_runners() == 0:
        return None
    stop_signal = make_stop_signal()
    group.foreach_env_runner(lambda runner: runner.watch_stop_signal(stop_signal), local_env_runner=False,
                             timeout_seconds=_STOP_SIGNAL_TIMEOUT_S)
    return stop_signal


def _train(algo, opts: LearnerOptions, rows: list[dict], directory, addresses: list[tuple[int, str, int]],
           output: Path, stop_reward: Optional[float], stop_iters: int, terminated: threading.Event,
           print_fn: Callable[[str], None]) -> list[dict]:
    """The training loop: until the stop reward, the iteration cap, or SIGTERM (after the iteration under way)."""
    from ..server.env_runner import counts_results_as_fragments

    started = time.monotonic()
    times = IterationTimes()
    wait_for_simulators = not is_offline(algo.config) and counts_results_as_fragments(algo.config)
    runners: list = []  # as the runners answered after the last iteration
    advised = False  # whether the learner said why most of what arrived was dropped (said once)
    board = TensorBoardLog(output, print_fn)  # event files beside progress.csv: tensorboard --logdir OUTPUT
    for iteration in range(1, stop_iters + 1):
        if (wait_for_simulators and _simulators_silent(runners)
                and not _wait_for_simulators(algo, directory, terminated, print_fn)):
            break  # SIGTERM while no simulator was connected or sending
        try:
            result = algo.train()
        except StoppedWaiting:
            break  # SIGTERM before this iteration sampled anything
        if is_offline(algo.config):
            result = result_for_report(result)  # the return of RLlib's evaluation runners
        runners = _live_runners(algo) if algo.env_runner_group is not None else []
        if directory is not None:
            directory.update(runners)
            _note_moves(addresses, runners, output, print_fn)
        row = row_from_result(result, time_s=time.monotonic() - started,
                              clients=sum(e.clients for e in runners), previous=rows[-1] if rows else None,
                              times=times.update(result))
        rows.append(row)
        print_fn(format_row(row, stop_reward))
        if not advised and (advice := drop_advice(row)) is not None:
            print_fn(advice)
            advised = True
        board.add(result, row)
        write_csv(rows, output / "progress.csv")
        if opts.checkpoint_every and iteration % opts.checkpoint_every == 0:
            algo.save_to_path(str(output / "checkpoint"))
        if terminated.is_set() or (stop_reward is not None and row["episode_return_mean"] >= stop_reward):
            break
    board.close()
    return rows
