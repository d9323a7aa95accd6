"""IMPALA and APPO with remote runners, trained from external simulators through ``rlinks learner``.

Both algorithms sample asynchronously: the driver keeps a ``sample()`` in
flight on every runner, packs ``train_batch / rollout_fragment_length``
results into one update without looking into them, and (Ray 2.60's
default, ``use_env_runner_state_server``) never sends weights to its
runners: each pulls them at the top of ``sample()``. A runner that did not
pull served its first weights for ever (training stalled at a random
policy); one that answered empty every idle poll made an update of no
episodes, which kills the learner. The shipped config runs as a user would
run it, with two dummy clients on the directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness import train_through_cli

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _shipped(tmp_path: Path, name: str, **stop) -> str:
    from rlinks_rllib.bundled import bundled_config

    spec = yaml.safe_load(bundled_config(name).read_text())
    spec["stop"] = {**spec["stop"], **stop}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


#: Below the shipped config's 150 (about 80 s of training here), to keep the suite short, and far above
#: what a random policy plays (about 22): a runner that serves its first weights for ever stays there.
TARGET = 50


#: Long enough for the learner to reach its first iteration with no simulator, so it must say it waits
#: (without the wait it sampled empty results, and a pack of them killed it some 25 s later; the log line
#: below is what holds the wait here, at 25 s less of the suite's time than outliving that crash).
CLIENTS_AFTER_S = 10


def test_impala_with_two_remote_runners_waits_for_its_simulators_then_learns(tmp_path):
    """The shipped IMPALA config: two remote runners, the weights reach the clients, the target is met.

    The simulators come 10 s after the learner listens: the learner waits
    for them between iterations rather than pack empty results.
    """
    run = train_through_cli(tmp_path, ["--config", _shipped(tmp_path, "impala_cartpole", reward=TARGET)],
                            ["-n", "2", "--", "--off-policy", "--max-steps", "1000000000"], timeout_s=420,
                            clients_after_s=CLIENTS_AFTER_S)
    assert run.returncode == 0 and run.reached >= TARGET, run.learner_log[-3000:]
    assert "no simulator connected: IMPALA waits for one" in run.learner_log
    rows = (run.output / "progress.csv").read_text().splitlines()
    header, last = rows[0].split(","), rows[-1].split(",")
    assert int(last[header.index("weights_seq_no")]) > 10, rows[-1]  # pulled from the state server
    assert "running NumpyPolicy here, off-policy" in run.client_out
    print(f"\nIMPALA reached {run.reached:.1f} in {run.seconds:.0f} s, {len(rows) - 1} iterations")
