"""Images beside vectors, end to end: the pixel example trains through the real CLI."""

from __future__ import annotations

import csv

import pytest

from harness import ROOT, train_through_cli

pytest.importorskip("onnxruntime")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_pixel_clients_train_ppo_through_the_cli(tmp_path):
    """`rlinks learner --config configs/ppo_pixels.yaml` with `rlinks client --script examples/pixel_client.py -n 2`.

    The clients ask for the policy graph and run the CNN+MLP module with
    onnxruntime; their Dict observations (a 32x32 image and a vector) reach
    RLlib, which trains until the config's target.
    """
    run = train_through_cli(
        tmp_path,
        ["--config", "configs/ppo_pixels.yaml"],
        ["-n", "2", "--script", str(ROOT / "examples" / "pixel_client.py")],
        timeout_s=780,
    )
    assert run.returncode == 0, run.learner_log[-4000:]
    assert run.reached >= 0.6, run.learner_log[-4000:]
    assert run.client_out.count("summary: steps=") == 2, run.client_out
    assert run.client_out.count("policy=OnnxPolicy") == 2, run.client_out
    rows = list(csv.DictReader(open(run.output / "progress.csv")))
    assert float(rows[-1]["policy_lag_max"]) == 0, rows[-1]
    print(f"\npixel clients trained PPO to {run.reached:.2f} in {run.seconds:.0f} s, {len(rows)} iterations")
