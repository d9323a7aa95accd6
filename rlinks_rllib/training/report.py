"""What a training run leaves behind: one row per iteration, a CSV and a curve.

Rows are plain dicts with the columns of :data:`COLUMNS`, taken from RLlib's
result dict by :func:`row_from_result`; :func:`write_csv` and
:func:`plot_curve` write them out, and :func:`format_row` prints one live.

A return is shown with enough digits for the run's scale
(:func:`format_return`): at least :data:`RETURN_DIGITS` significant ones of
the stop reward's magnitude (or the value's, without one), as many decimals
as the stop reward has, and never a value below the stop reward that reads
as the stop reward (a game with rewards in 0..1 and ``--stop-reward 0.8``
shows ``0.786``, not ``0.8``, an iteration before the run stops).
"""

from __future__ import annotations

import csv
import decimal
import io
import math
import numbers
from pathlib import Path
from typing import Iterable, Mapping, Optional

from ..server.metrics import TAKEOVER_RATE
from .files import write_text_whole
from .timings import TIME_COLUMNS

__all__ = ["COLUMNS", "row_from_result", "format_row", "format_return", "write_csv", "plot_curve", "drop_advice"]

COLUMNS = ("iteration", "env_steps", "env_steps_iter", "episode_return_mean", "time_s", "steps_per_s", "clients",
           "weights_seq_no", "policy_lag_max", *TIME_COLUMNS)
#: Prefix of the per-policy return columns a multi-agent run adds (``return_<module id>``).
POLICY_RETURN_PREFIX = "return_"
#: The column of a run whose simulators took over steps (``takeover``): taken-over steps / steps per episode,
#: mean over the episodes that finished in the iteration (NaN where none did); absent from other runs.
TAKEOVER_COLUMN = "takeover_rate"
#: The columns of an off-policy run whose runners dropped steps past their backlog (``off_policy_backlog``):
#: the steps dropped so far, and the share of this iteration's arrivals dropped; absent from other runs.
DROPPED_COLUMN = "steps_dropped"
DROPPED_SHARE_COLUMN = "dropped_share"
_SINGLE_AGENT_MODULE = "default_policy"
#: Significant digits a return is shown with at least (of the stop reward's magnitude, else its own).
RETURN_DIGITS = 3
#: Most decimals a return is shown with (a value a hair below the stop reward included).
MAX_RETURN_DECIMALS = 9


def _count(value) -> int:
    """An RLlib metric as a count; 0 for a missing one or NaN (an iteration where no runner answered)."""
    return int(value) if isinstance(value, numbers.Real) and value == value and value else 0


def row_from_result(result: dict, *, time_s: float, clients: int, previous: dict | None,
                    times: Mapping[str, float] | None = None) -> dict:
    """One row of the run's table from an ``algo.train()`` result.

    ``times`` is the iteration's :meth:`~.timings.IterationTimes.update`
    (seconds per phase); without it those columns read NaN.
    """
    runners = result.get("env_runners", {})
    rlinks = runners.get("rlinks", {})
    steps = _count(runners.get("num_env_steps_sampled_lifetime"))
    dt = time_s - (previous["time_s"] if previous else 0.0)
    ds = steps - (previous["env_steps"] if previous else 0)
    return {
        "iteration": int(result.get("training_iteration", 0)),
        "env_steps": steps,
        # What the runners' sample() handed to this iteration's training step (NaN when none answered).
        "env_steps_iter": _count(runners.get("num_env_steps_sampled")),
        "episode_return_mean": float(runners.get("episode_return_mean", math.nan)),
        "time_s": round(time_s, 3),
        "steps_per_s": round(ds / dt, 1) if dt > 0 else 0.0,
        "clients": clients,
        "weights_seq_no": _count(rlinks.get("weights_seq_no")),
        "policy_lag_max": float(_count(rlinks.get("policy_lag_max"))),
        **{column: round(float((times or {}).get(column, math.nan)), 4) for column in TIME_COLUMNS},
        **_policy_returns(runners),
        **_takeover_rate(rlinks),
        **_dropped(rlinks, ds, previous),
    }


def _dropped(rlinks: dict, handed: int, previous: dict | None) -> dict:
    """``steps_dropped`` and ``dropped_share`` once a runner has dropped a backlog (nothing before)."""
    dropped = _count(rlinks.get("dropped_backlog_steps"))
    if not dropped:
        return {}
    now = dropped - _count((previous or {}).get(DROPPED_COLUMN))
    return {DROPPED_COLUMN: dropped, DROPPED_SHARE_COLUMN: round(now / (now + handed), 4) if now + handed > 0 else 0.0}


#: A learner whose runners drop more than this share of what arrives is told once why and what to set.
DROP_ADVICE_SHARE = 0.5


def drop_advice(row: Mapping) -> Optional[str]:
    """What to tell a user whose off-policy runners dropped most of an iteration's steps; ``None`` otherwise.

    The runners drop the oldest steps beyond their backlog (``off_policy_backlog:
    drop``, the default), and the live line shows it as ``dropped``; the
    usual cause is simulators that share the learner's machine and take the
    cores it trains on, which nothing else says at run time.
    """
    share = row.get(DROPPED_SHARE_COLUMN)
    if share is None or not share > DROP_ADVICE_SHARE:
        return None
    return (f"the runners dropped {share:.0%} of the steps that arrived: the learner takes fewer than the "
            f"simulators send, and trains on the freshest. If the simulators run on the learner's machine, they "
            f"take the cores it trains on: set 'off_policy_backlog: pace' in the config's rlinks section, so they "
            f"wait for the learner and send what it takes (docs/CONFIG.md)")


def _takeover_rate(rlinks: dict) -> dict:
    """``takeover_rate`` once the runners have seen a take-over (nothing before, so other runs keep their table)."""
    if TAKEOVER_RATE not in rlinks:
        return {}
    value = rlinks[TAKEOVER_RATE]
    value = float(value) if isinstance(value, numbers.Real) else math.nan
    return {TAKEOVER_COLUMN: round(value, 4) if math.isfinite(value) else math.nan}


def _policy_returns(runners: dict) -> dict:
    """``return_<module>`` per policy of a multi-agent run (none for a single-agent one)."""
    modules = runners.get("module_episode_returns_mean") or {}
    if set(modules) <= {_SINGLE_AGENT_MODULE}:
        return {}
    return {POLICY_RETURN_PREFIX + str(m): round(float(v), 3) for m, v in sorted(modules.items())}


def _policy_columns(rows: Iterable[dict]) -> list[str]:
    """The per-policy columns of these rows, in order of first appearance."""
    found: dict[str, None] = {}
    for row in rows:
        found.update((k, None) for k in row if k.startswith(POLICY_RETURN_PREFIX))
    return list(found)


def _extra_columns(rows: list[dict]) -> list[str]:
    """Columns only some runs have: the take-over rate, the dropped steps, then the per-policy returns."""
    return ([TAKEOVER_COLUMN] * any(TAKEOVER_COLUMN in row for row in rows)
            + [DROPPED_COLUMN, DROPPED_SHARE_COLUMN] * any(DROPPED_COLUMN in row for row in rows)
            + _policy_columns(rows))


def return_decimals(value: float, target: Optional[float] = None) -> int:
    """Decimals for a return of ``value`` in a run that stops at ``target`` (see the module's docs)."""
    scale = abs(target) if target else abs(value) if math.isfinite(value) else 0.0
    decimals = RETURN_DIGITS - 1 - math.floor(math.log10(scale)) if scale > 0 else 1
    if target is not None and math.isfinite(target):
        exponent = decimal.Decimal(repr(float(target))).normalize().as_tuple().exponent
        decimals = max(decimals, -exponent if isinstance(exponent, int) else 0)
    return min(max(decimals, 1), MAX_RETURN_DECIMALS)


def format_return(value: float, target: Optional[float] = None) -> str:
    """``value`` with :func:`return_decimals` decimals, more while a value below ``target`` would read as it.

    ``"nan"`` for NaN (the caller words it).
    """
    if not math.isfinite(value):
        return "nan"
    decimals = return_decimals(value, target)
    text = f"{value:.{decimals}f}"
    while target is not None and value < target <= float(text) and decimals < MAX_RETURN_DECIMALS:
        decimals += 1
        text = f"{value:.{decimals}f}"
    return text


def format_row(row: dict, target: Optional[float] = None) -> str:
    """The live line for one iteration of a run that stops at a mean return of ``target`` (if any).

    The return reads "no end" when no episode ended in the iteration: RLlib
    clears its windowed mean at every iteration's reduce, so the result holds
    NaN then (an off-policy learner taking fewer steps per iteration than an
    episode lasts, say), which ``progress.csv`` keeps as ``nan``. Its digits
    are :func:`format_return`'s, and so are each policy's.
    """
    ret = row["episode_return_mean"]
    shown = f"{format_return(ret, target):>7}" if math.isfinite(ret) else " no end"
    return (
        f"iter {row['iteration']:4d} | env steps {row['env_steps']:9,d} | return {shown} | "
        f"{row['steps_per_s']:8,.0f} steps/s | clients {row['clients']:3d} | weights v{row['weights_seq_no']}"
        + (f" | lag {row['policy_lag_max']:.0f}" if row["policy_lag_max"] else "")
        + (f" | take-over {row[TAKEOVER_COLUMN]:.1%}" if math.isfinite(row.get(TAKEOVER_COLUMN, math.nan)) else "")
        + (f" | dropped {row[DROPPED_SHARE_COLUMN]:.0%}" if DROPPED_COLUMN in row else "")
        + "".join(f" | {k[len(POLICY_RETURN_PREFIX):]} {format_return(row[k], target)}" for k in _policy_columns([row]))
    )


def write_csv(rows: Iterable[dict], path: Path) -> None:
    """All rows so far, rewritten whole (a run is at most thousands of rows); readers never see half a table."""
    rows = list(rows)
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=[*COLUMNS, *_extra_columns(rows)], restval="")
    writer.writeheader()
    writer.writerows(rows)
    write_text_whole(path, table.getvalue())


def plot_curve(rows: list[dict], path: Path, *, target: float | None = None, title: str = "") -> None:
    """Mean episode return against env steps, as a PNG; a multi-agent run adds one line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["env_steps"] for r in rows]
    returns = [r["episode_return_mean"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot(steps, returns, marker="o", markersize=3, label="mean episode return")
    for column in _policy_columns(rows):
        points = [(r["env_steps"], r[column]) for r in rows if column in r]
        ax.plot(*zip(*points), marker=".", markersize=3, linewidth=1,
                label=f"policy {column[len(POLICY_RETURN_PREFIX):]}")
    if target is not None:
        ax.axhline(target, color="tab:red", linestyle="--", linewidth=1, label=f"target {target:g}")
    ax.set_xlabel("env steps sampled")
    ax.set_ylabel("mean episode return")
    ax.set_title(title or "rlinks-rllib learning curve")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
