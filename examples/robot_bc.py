"""Behaviour cloning from live robot data: four actors ``put`` camera images and action chunks,
a plain PyTorch loop under Ray Train (two workers) trains on them, and the model goes back to the actors.

Read top to bottom. The pieces (docs/DATASET.md):

* each actor (a thread here; a robot or a simulator elsewhere) sends one
  sample per step with :class:`~rlinks_rllib.client.RLinkActor`: a 480x640x3
  uint8 image and a 50x14 float32 action chunk (a two-arm robot's next 50
  joint targets), and asks for the newest model with ``get_remote_model()``;
* each Ray Train worker reads its own share through an
  :class:`~rlinks_rllib.dataset.RLinkDataset` listening on
  ``base_port + rank``: actor ``i`` talks to worker ``i % workers``, so the
  shares are disjoint by construction;
* every ``--sync-every`` steps each worker pushes its (DDP-identical) model
  to its actors with :class:`~rlinks_rllib.dataset.RLinkSyncModel`.

    python examples/robot_bc.py --samples-per-actor 32

Prints one JSON line: the loss, which actors each worker heard from, and the
model versions each actor saw.
"""

from __future__ import annotations

import argparse
import json
import socket
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import ray
import torch
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

from rlinks_rllib.client import RLinkActor
from rlinks_rllib.dataset import RLinkDataset, RLinkSyncModel

IMAGE = (480, 640, 3)
CHUNK = (50, 14)


class Policy(torch.nn.Module):
    """Image -> action chunk: pool the camera image down, then a small MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = torch.nn.AdaptiveAvgPool2d((12, 16))
        self.net = torch.nn.Sequential(torch.nn.Linear(3 * 12 * 16, 64), torch.nn.ReLU(),
                                       torch.nn.Linear(64, CHUNK[0] * CHUNK[1]))

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.pool(image.permute(0, 3, 1, 2).float() / 255.0)
        return self.net(x.flatten(1)).view(-1, *CHUNK)


def train_loop(config: dict) -> None:
    """One Ray Train worker: read this worker's share, train, sync back, wait for the actors to leave."""
    context = ray.train.get_context()
    # Whole batches only: DDP's workers step in lock-step, so each must take the same number of batches.
    dataset = RLinkDataset(base_port=config["base_port"], batch_size=config["batch_size"],
                           max_samples=config["samples_per_worker"], idle_timeout=60, partial_batch_after=None)
    model = ray.train.torch.prepare_model(Policy())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    sync = RLinkSyncModel(dataset)
    seen: set[int] = set()
    loss = torch.tensor(0.0)
    step = 0
    for step, batch in enumerate(dataset, start=1):
        seen.update(int(a) for a in batch["actor"].tolist())
        loss = torch.nn.functional.mse_loss(model(batch["image_0"]), batch["action"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % config["sync_every"] == 0:
            sync.sync(model.module if hasattr(model, "module") else model)
    sync.sync(model.module if hasattr(model, "module") else model)
    deadline = time.monotonic() + 60
    while dataset.server.clients and time.monotonic() < deadline:
        time.sleep(0.1)  # the actors fetch the last model, then leave
    dataset.close()
    summary = {"rank": context.get_world_rank(), "steps": step, "loss": float(loss), "actors": sorted(seen)}
    # Every worker's own summary (Ray Train's result holds rank 0's metrics only).
    Path(config["out_dir"], f"rank{summary['rank']}.json").write_text(json.dumps(summary))
    ray.train.report(summary)


def actor(index: int, address: str, samples: int, versions: list[int]) -> None:
    """One robot: a sample per step, the newest model now and then."""
    rng = np.random.default_rng(index)
    with RLinkActor(address, timeout=60, retry_attempts=100, backoff_initial=0.1, backoff_cap=1.0) as robot:
        for i in range(samples):
            image = rng.integers(0, 255, IMAGE, dtype=np.uint8)
            chunk = np.full(CHUNK, image.mean() / 255.0, np.float32)  # something learnable from the image
            robot.put({"image_0": image, "action": chunk, "actor": index, "index": i})
            if i % 8 == 7:
                model = robot.get_remote_model()
                if model is not None:
                    versions.append(model.version)
        robot.flush()
        model = robot.get_remote_model()
        versions.append(0 if model is None else model.version)


def free_base_port(workers: int) -> int:
    """A base port with ``workers`` free ports above it (at the moment of asking)."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + workers >= 65535:
            continue
        try:
            for port in range(base, base + workers):
                socket.create_server(("127.0.0.1", port)).close()
            return base
        except OSError:
            continue


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actors", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--samples-per-actor", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--sync-every", type=int, default=2)
    parser.add_argument("--base-port", type=int, default=0, help="0: a free one")
    args = parser.parse_args()
    if args.actors % args.workers or (args.actors // args.workers * args.samples_per_actor) % args.batch_size:
        parser.error("each worker must get whole batches: actors divisible by workers, share by batch size")
    base_port = args.base_port or free_base_port(args.workers)

    out_dir = tempfile.mkdtemp(prefix="rlinks_robot_bc_")
    ray.init(num_cpus=args.workers + 1, include_dashboard=False, log_to_driver=False)
    versions: list[list[int]] = [[] for _ in range(args.actors)]
    threads = [threading.Thread(target=actor, args=(i, f"127.0.0.1:{base_port + i % args.workers}",
                                                    args.samples_per_actor, versions[i]), daemon=True)
               for i in range(args.actors)]
    for thread in threads:
        thread.start()
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"base_port": base_port, "batch_size": args.batch_size, "sync_every": args.sync_every,
                           "samples_per_worker": args.actors // args.workers * args.samples_per_actor,
                           "out_dir": out_dir},
        scaling_config=ScalingConfig(num_workers=args.workers, use_gpu=False),
        run_config=RunConfig(storage_path=out_dir, name="robot_bc"),
    )
    trainer.fit()
    for thread in threads:
        thread.join(60)
    ray.shutdown()
    workers = [json.loads(Path(out_dir, f"rank{rank}.json").read_text()) for rank in range(args.workers)]
    print(json.dumps({"workers": workers, "versions_seen": versions}))


if __name__ == "__main__":
    main()
