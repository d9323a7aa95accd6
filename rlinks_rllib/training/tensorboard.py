"""TensorBoard event files beside ``progress.csv``: ``tensorboard --logdir DIR`` shows a learner's run.

ML-Agents', Stable-Baselines3's and RLlib-under-Tune's users look at
TensorBoard first, so ``rlinks learner --output DIR`` writes event files into
``DIR`` as well, one point per iteration, with torch's ``SummaryWriter``
(the ``tensorboard`` package writes the files; both come with the ``rllib``
extra). Their x-axis is the env steps sampled so far, the axis that compares
runs by sample efficiency (TensorBoard keeps the wall time too). Two kinds
of scalar:

* RLlib's result, every number in it under its own path
  (``env_runners/episode_return_mean``, ``learners/default_policy/total_loss``,
  ``timers/...``; the runners' own metrics among them:
  ``env_runners/rlinks/policy_lag_max``, take-overs, dropped steps);
* ours, the live line's columns under ``rlinks/`` (``rlinks/clients``,
  ``rlinks/policy_lag_max``, ``rlinks/takeover_rate``, ``rlinks/steps_dropped``,
  ``rlinks/dropped_share``, ``rlinks/episode_return_mean``, the time columns, ...).

Each iteration is flushed as it ends, so a TensorBoard watching the folder
shows it at once and a learner killed next loses nothing written. NaN
values (RLlib's mean of an iteration that ended no episode) are written as
they are; TensorBoard leaves a gap.
"""

from __future__ import annotations

import numbers
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional

__all__ = ["TensorBoardLog", "scalars_of", "OURS"]

#: The tag prefix of our own scalars (the live line's columns).
OURS = "rlinks"
#: Nesting followed into RLlib's result (deeper than any of its metrics; a cycle can't loop).
_MAX_DEPTH = 8
#: Parts of RLlib's result that are no metrics (the config, a checkpoint's path, ...).
_SKIPPED = frozenset({"config", "checkpoint_dir_name", "hostname", "node_ip", "pid", "date", "trial_id",
                      "experiment_tag", "timestamp", "done"})


def scalars_of(result: Mapping[str, Any], prefix: str = "", depth: int = 0) -> Iterator[tuple[str, float]]:
    """Every number in ``result`` (a nest of dicts) as ``("a/b/c", value)``; bools, strings and lists left out."""
    for key, value in result.items():
        if not prefix and key in _SKIPPED:
            continue
        tag = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            if depth < _MAX_DEPTH:
                yield from scalars_of(value, tag, depth + 1)
        elif isinstance(value, numbers.Real) and not isinstance(value, bool):
            yield tag, float(value)
        elif hasattr(value, "item") and getattr(value, "shape", None) == ():  # a numpy or torch scalar
            item = value.item()
            if isinstance(item, numbers.Real) and not isinstance(item, bool):
                yield tag, float(item)


class TensorBoardLog:
    """The run's event files in ``folder``, one point per iteration.

    Args:
        folder: the learner's ``--output`` folder (made if missing).
        print_fn: where the one line goes if TensorBoard can't be written
            (the ``tensorboard`` package missing): the run goes on without it.
    """

    def __init__(self, folder: Path, print_fn: Callable[[str], None] = print) -> None:
        self._writer: Optional[Any] = None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:  # torch without the tensorboard package
            print_fn(f"no TensorBoard event files in {folder}: {exc} (pip install tensorboard, or "
                     "rlinks-rllib[rllib], which brings it)")
            return
        folder.mkdir(parents=True, exist_ok=True)
        self._writer = SummaryWriter(log_dir=str(folder))

    @property
    def writing(self) -> bool:
        """Whether event files are being written."""
        return self._writer is not None

    def add(self, result: Mapping[str, Any], row: Mapping[str, Any]) -> None:
        """One iteration: RLlib's ``result`` and our ``row`` (:func:`~.report.row_from_result`), flushed."""
        writer = self._writer
        if writer is None:
            return
        step = int(row["env_steps"])
        for tag, value in scalars_of(result):
            writer.add_scalar(tag, value, step)
        for column, value in row.items():
            if isinstance(value, numbers.Real) and not isinstance(value, bool) and column != "env_steps":
                writer.add_scalar(f"{OURS}/{column}", float(value), step)
        writer.flush()

    def close(self) -> None:
        """Write what is left and close the files (again: nothing)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
