"""A script written for RLlib's old PolicyClient trains PPO through `rlinks learner`, its import line changed."""

from __future__ import annotations

import re

import pytest

from harness import ROOT, train_through_cli

SCRIPT = str(ROOT / "tests" / "policy_client_cartpole.py")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_old_policy_client_script_trains_ppo_cartpole_to_450_local_and_remote(tmp_path):
    """Two copies, 10% of their actions random (sent with log_action), every 5th episode
    training_enabled=False: one runs the policy itself, one asks the runner for every other action
    (inference_mode='remote', where the runner records the logged actions and skips the untrained episodes)."""
    run = train_through_cli(
        tmp_path,
        ["--config", "ppo_cartpole", "--num-env-runners", "1", "--stop-reward", "450"],
        ["-n", "1", "--script", SCRIPT, "--", "--inference-mode", "local", "--off-policy-fraction", "0.1",
         "--eval-every", "5"],
        more_clients=[["-n", "1", "--script", SCRIPT, "--", "--inference-mode", "remote", "--off-policy-fraction",
                       "0.1", "--eval-every", "5"]],
    )
    assert run.returncode == 0, run.learner_log[-3000:]
    assert run.reached >= 450, run.learner_log[-3000:]
    summaries = dict(re.findall(r"summary: mode=(\w+) (.*)", run.client_out))
    assert set(summaries) == {"local", "remote"}, run.client_out
    for mode in ("local", "remote"):
        counts = dict(item.split("=") for item in summaries[mode].split())
        assert int(counts["untrained"]) >= 1 and int(counts["logged_actions"]) > 100, summaries
    print(f"\nold PolicyClient script, local and remote: PPO CartPole at {run.reached:.1f} in {run.seconds:.0f} s")
