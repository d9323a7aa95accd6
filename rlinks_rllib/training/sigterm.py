"""SIGTERM (``ray job stop``, ``docker stop``, ``kill``): the learner ends the iteration under way in seconds.

The learner then checkpoints and exits 143 (learner.py). Three things keep
an RLlib iteration going after the signal, and each is cut here:

- **Its minimums.** ``Algorithm.train`` repeats the training step until
  ``min_time_s_per_iteration`` and the minimum sampled and trained steps are
  met (SAC's and DQN's want 100 and 1,000 env steps): they are set to 0, so
  the iteration ends after its next training step (:func:`iteration_minimums`).
- **The runners' waits.** A runner waits in ``sample()`` for its share of
  the steps (up to 45 s under the bundled PPO config, simulators connected
  but silent). Every runner is told to stop handing steps over
  (``RLinkEnvRunner.stop_handing``): a wait under way returns at once with
  what it holds, which RLlib gets and trains on (it was confirmed to the
  clients); later calls return nothing. The driver's own runner is called
  directly; remote runners through the learner's :class:`StopSignal`,
  which they watch from a thread of their own (server/stop_signal.py): a
  call would wait behind the ``sample()`` under way.
- **RLlib's sampling loop.** ``synchronous_parallel_sample`` (PPO, DQN,
  SAC) samples again and again until the train batch is full, which never
  happens once the simulators are gone or the runners hand nothing over.
  From the signal on, its next round ends the loop instead
  (:func:`_end_sampling_rounds`): with the steps it has, which the
  iteration trains on; or, with none, by :class:`StoppedWaiting`, which
  drops an iteration that took nothing (so nothing confirmed to a client is
  lost). IMPALA and APPO sample asynchronously and end with their training
  step.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
from typing import Any, Iterator, Optional

from ..protocol.errors import RLinksError
from . import quiet

__all__ = ["StoppedWaiting", "sigterm_sets", "iteration_minimums"]

logger = logging.getLogger("rlinks_rllib.learner")

class StoppedWaiting(RLinksError):
    """SIGTERM came before the iteration's sampling took a single step: the iteration is dropped."""


@contextlib.contextmanager
def sigterm_sets(flag: threading.Event, algo: Any = None, stop_signal: Any = None) -> Iterator[None]:
    """While inside, SIGTERM sets ``flag`` and ends the iteration under way (main thread only).

    With ``algo`` (and ``stop_signal``, when it has remote runners) the
    iteration is cut short as the module docstring says; without, only
    ``flag`` is set. The handler itself only sets flags and starts a thread:
    the runners are told from that thread, and the sampling loop ends in
    the main thread's own course.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    group = getattr(algo, "env_runner_group", None) if algo is not None else None
    teller = threading.Thread(target=_tell_runners, args=(group, stop_signal), name="rlinks-sigterm-stop",
                              daemon=True)

    def on_sigterm(_signum: int, _frame: Any) -> None:
        if flag.is_set():
            return
        flag.set()
        if algo is not None:
            iteration_minimums(algo.config, _NO_MINIMUMS)
        if group is not None:
            quiet.install_stopping()
            _end_sampling_rounds(group)
            teller.start()

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    kept = iteration_minimums(algo.config, None) if algo is not None else None
    try:
        yield
    finally:
        if teller.is_alive():
            teller.join()  # bounded: set_signal waits SET_TIMEOUT_S at most
        signal.signal(signal.SIGTERM, previous)
        if group is not None:
            _restore_sampling_rounds(group)
        if kept is not None:
            iteration_minimums(algo.config, kept)  # the checkpoint keeps the config's own


def _tell_runners(group: Any, stop_signal: Any) -> None:
    """Tell the driver's runner and every remote one to stop handing steps over (see the module docstring)."""
    from ..server.stop_signal import set_signal

    stop_handing = getattr(group.local_env_runner, "stop_handing", None)
    if stop_handing is not None:
        stop_handing()
    if stop_signal is not None:
        set_signal(stop_signal)


#: The methods of an EnvRunnerGroup replaced, on the instance, once SIGTERM came (:func:`_end_sampling_rounds`).
_REPLACED = ("foreach_env_runner", "num_remote_workers")


def _end_sampling_rounds(group: Any) -> None:
    """Make RLlib's ``synchronous_parallel_sample`` end at its next round (see the module docstring).

    Its loop asks the group for remote runners, samples them through
    ``foreach_env_runner`` (the driver's own runner directly when there are
    none), and ends when a round returns nothing. From now on, when that
    loop asks, the group says it has remote runners and their round returns
    nothing, or raises :class:`StoppedWaiting` if the loop took no step
    yet. Every other caller gets the group's own answers. Replaced on this
    instance only, from the signal on, in the main thread.
    """
    foreach = group.foreach_env_runner
    num_remote = group.num_remote_workers

    def foreach_env_runner(*args, **kwargs):
        caller = sys._getframe(1)
        if not _is_sampling_loop(caller):
            return foreach(*args, **kwargs)
        if not caller.f_locals.get("agent_or_env_steps"):
            raise StoppedWaiting()
        return []

    def num_remote_workers(*args, **kwargs):
        found = num_remote(*args, **kwargs)
        return max(1, found) if _is_sampling_loop(sys._getframe(1)) else found

    group.foreach_env_runner = foreach_env_runner
    group.num_remote_workers = num_remote_workers


def _restore_sampling_rounds(group: Any) -> None:
    for name in _REPLACED:
        group.__dict__.pop(name, None)


def _is_sampling_loop(frame: Any) -> bool:
    code = frame.f_code
    return code.co_name == "synchronous_parallel_sample" and "rllib" in code.co_filename


#: RLlib's settings that keep an iteration going (``Algorithm.train`` repeats its training step until all are met).
_MINIMUMS = ("min_time_s_per_iteration", "min_sample_timesteps_per_iteration", "min_train_timesteps_per_iteration")
_NO_MINIMUMS = dict.fromkeys(_MINIMUMS, 0)


def iteration_minimums(config: Any, values: Optional[dict]) -> dict:
    """The config's iteration minimums; with ``values``, set them first.

    The config is frozen once the algorithm is built; RLlib reads these three
    anew before every repeat of the training step, so setting them past the
    freeze is how an iteration is cut short without touching anything else.
    """
    if values is not None:
        for name, value in values.items():
            object.__setattr__(config, name, value)
    return {name: getattr(config, name) for name in _MINIMUMS}
