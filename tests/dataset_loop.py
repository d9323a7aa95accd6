"""A training loop of one's own, for the crash tests: it reads an ``RLinkDataset`` and records what it trained on.

Run as ``python tests/dataset_loop.py --port P --record FILE [--step-s S] [--partial-after S]
[--tls-cert PEM --tls-key KEY]``.
It prints ``LISTENING`` once actors may connect, ``STEP n`` when batch ``n``
enters its training step (``--step-s`` seconds of it), and ``DONE n`` once
the batch's samples are recorded (a line ``ACTOR INDEX`` each, flushed to the
disk) and before it asks for the next batch, which confirms this one. A
test kills it with SIGKILL at any of these moments.
"""

from __future__ import annotations

import argparse
import os
import time

from rlinks_rllib.dataset import RLinkDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--step-s", type=float, default=0.0)
    parser.add_argument("--partial-after", type=float, default=60.0)
    parser.add_argument("--tls-cert", help="PEM certificate (and key) of the dataset: TLS on")
    parser.add_argument("--tls-key")
    args = parser.parse_args()
    tls = {} if args.tls_cert is None else {"tls_cert_file": args.tls_cert, "tls_key_file": args.tls_key}
    with RLinkDataset(port=args.port, batch_size=args.batch_size, partial_batch_after=args.partial_after,
                      **tls) as dataset, open(args.record, "a") as record:
        print("LISTENING", flush=True)
        for n, batch in enumerate(dataset):
            print(f"STEP {n}", flush=True)
            time.sleep(args.step_s)  # the training step
            for actor, index in zip(batch["actor"].tolist(), batch["index"].tolist()):
                record.write(f"{actor} {index}\n")
            record.flush()
            os.fsync(record.fileno())
            print(f"DONE {n} ({len(batch['index'])} samples)", flush=True)


if __name__ == "__main__":
    main()
