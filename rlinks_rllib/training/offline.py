"""``rlinks learner`` for an algorithm that trains from a recording (BC, MARWIL, CQL), not from simulators.

Such a config names its data in ``offline_data.input_`` (or ``--input``):
RLlib reads it with Ray Data, and no runner listens. What the learner reports
then comes from RLlib's evaluation runners, which step the gymnasium env of
``spaces.from_env``: :func:`result_for_report` puts their return where the
report reads it, and the steps trained on where it reads the steps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .config_file import ConfigFileError

__all__ = ["is_offline", "check_inputs", "result_for_report", "cpus_for_reading", "close_reader", "quiet_reading"]


def is_offline(config: Any) -> bool:
    """Whether ``config`` trains from recorded data only (no runner of its own samples)."""
    return bool(config.is_offline) and not config.is_online


def check_inputs(config: Any) -> list[str]:
    """The recording folders an offline config reads, each checked to hold Parquet files.

    Raises:
        ConfigFileError: a local folder is missing or holds no ``.parquet`` file.
    """
    inputs = config.input_ if isinstance(config.input_, list) else [config.input_]
    for path in inputs:
        if "://" in path:
            continue  # s3://, gs://: Ray Data says what is wrong there
        if not Path(path).exists():
            raise ConfigFileError(f"offline_data.input_: no recording at {path} (record one with rlinks record, "
                                  "or pass --input)")
        if Path(path).is_dir() and not any(Path(path).rglob("*.parquet")):
            raise ConfigFileError(f"offline_data.input_: {path} holds no .parquet file")
    return list(inputs)


def result_for_report(result: dict) -> dict:
    """An offline iteration's result as :func:`~.report.row_from_result` reads an online one.

    The return is the evaluation runners' (NaN in an iteration without
    evaluation); the env steps are those trained on, summed over learners.
    """
    from ray.rllib.utils.metrics import ALL_MODULES, NUM_ENV_STEPS_TRAINED_LIFETIME

    evaluation = dict(result.get("evaluation", {}).get("env_runners", {}))
    trained = result.get("learners", {}).get(ALL_MODULES, {}).get(NUM_ENV_STEPS_TRAINED_LIFETIME)
    evaluation["num_env_steps_sampled_lifetime"] = trained
    evaluation.pop("num_env_steps_sampled", None)
    return {**result, "env_runners": evaluation}


def cpus_for_reading(config: Any) -> int:
    """Logical CPUs Ray Data takes to read an offline config's data: its OfflinePreLearners and a read task."""
    if not is_offline(config):
        return 0
    kwargs = config.map_batches_kwargs or {}
    return int(kwargs.get("concurrency", max(2, int(config.num_learners or 0)))) + 1


def close_reader(algo: Any) -> None:
    """End RLlib's iterators over the recording while Ray still runs.

    Left to the garbage collector, a generator of Ray Data's ends after Ray
    has shut down, and Ray Data prints a traceback. RLlib (2.60) keeps them in
    ``offline_data.batch_iterators`` and, with ``dataset_num_iters_per_learner``,
    in the local learner's ``iterator``; a place that is not there is skipped.
    """
    learner = getattr(getattr(algo, "learner_group", None), "_learner", None)
    batches = getattr(getattr(algo, "offline_data", None), "batch_iterators", None)
    found = [getattr(getattr(learner, "iterator", None), "_epoch_iterator", None),
             *(batches if isinstance(batches, list) else [batches])]
    for iterator in found:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()


def quiet_reading() -> None:
    """No Ray Data progress report every ten seconds between the learner's own lines (the driver reads)."""
    import logging

    import ray.data

    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)  # "Progress bars disabled"
