"""The ``rlinks`` command: ``learner``, ``record``, ``client``, ``endpoints``, ``web`` and ``demo``.

    rlinks learner --config ppo_cartpole [--port 5555 --gpu-num 1 ...]
    rlinks record --config ppo_cartpole --out runs/recording [--stop-steps 20000]
    rlinks client --address 127.0.0.1:5556 -n 4 [-- extra client args]
    rlinks endpoints runs/latest
    rlinks web [--learner ws://127.0.0.1:5555 --port 8000]
    rlinks demo

``python -m rlinks_rllib`` is the same command. ``rlinks client``,
``rlinks endpoints`` and ``rlinks web`` import nothing beyond the client side (numpy, msgpack),
so they run on a simulator machine's plain ``pip install rlinks-rllib``;
``learner`` and ``demo`` need the ``rllib`` extra.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from pathlib import Path
from typing import Sequence

from . import bundled

__all__ = ["main"]

DEMO_CONFIG = "ppo_cartpole"
DEMO_CLIENTS = 4
#: What the ``rllib`` extra brings; missing on a simulator machine's client-only install.
_LEARNER_MODULES = {"ray", "torch", "gymnasium", "yaml", "PIL", "matplotlib"}


def _runner_arguments(p) -> None:
    """Where the runners listen and how many there are: ``rlinks learner`` and ``rlinks record`` alike."""
    p.add_argument("--host", help="address runners listen on (0.0.0.0 for simulators on other machines)")
    p.add_argument("--port", type=int, help="base port: runner i listens on PORT+i (0: any free port)")
    p.add_argument("--num-env-runners", type=int, help="EnvRunners (each with its own port)")


def _learner_parser(sub) -> None:
    p = sub.add_parser(
        "learner",
        help="train an RLlib algorithm on simulators that connect over TCP",
        description="Build the algorithm a config file describes, print where simulators connect, train with "
                    "a live view, and write a checkpoint, progress.csv and learning_curve.png to --output. "
                    "Exits 2 if --stop-iters is reached before --stop-reward.",
    )
    p.add_argument("--config", required=True,
                   help="YAML file, or a bundled config by name (ppo_cartpole, appo_cartpole, ...; see configs/)")
    _runner_arguments(p)
    p.add_argument("--gpu-num", type=int, help="learners with one GPU each (0: learn on the CPU)")
    p.add_argument("--num-learners", type=int, help="learner processes (overrides --gpu-num's count)")
    p.add_argument("--stop-reward", type=float, help="stop once the mean episode return reaches this")
    p.add_argument("--stop-iters", type=int, help="stop after this many iterations")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="N", help="checkpoint every N iterations")
    p.add_argument("--output", default="runs/latest", help="folder for checkpoint, CSV and curve")
    p.add_argument("--resume", metavar="CHECKPOINT", help="continue from a checkpoint folder")
    p.add_argument("--input", metavar="DIR",
                   help="a recording to train from (rlinks record): an offline config's offline_data.input_")
    p.add_argument("--ws-allowed-origin", action="append", default=[], metavar="ORIGIN",
                   help="let web pages of ORIGIN (http://127.0.0.1:8000) connect over WebSocket, beside the "
                        "config's ws_allowed_origins (repeat for more)")


def _record_parser(sub) -> None:
    p = sub.add_parser(
        "record",
        help="record what simulators send, as RLlib offline data, without training",
        description="Build the runners a config file describes, print where simulators connect, and record every "
                    "env step they send to --out as RLlib's offline data (Parquet; see docs/RECORDING.md). Nothing "
                    "is trained: clients play the initial weights, a checkpoint's (--resume) or their own actions. "
                    "Ends after --stop-steps, on Ctrl-C or SIGTERM, with every file whole.",
    )
    p.add_argument("--config", required=True, help="YAML file, or a bundled config by name (ppo_cartpole, ...)")
    p.add_argument("--out", required=True, metavar="DIR", help="the recording folder (rlinks.record_dir)")
    _runner_arguments(p)
    p.add_argument("--resume", metavar="CHECKPOINT", help="clients play the weights of this checkpoint")
    p.add_argument("--stop-steps", type=int, metavar="N", help="stop after N env steps (default: Ctrl-C)")
    p.add_argument("--output", default="runs/record", help="folder for endpoints.json and directory.json")


def _client_parser(sub) -> None:
    from .training.clients import CONTRACT  # the standard library only: fine on a simulator machine

    p = sub.add_parser(
        "client",
        help="run N copies of a simulator client against a learner",
        description="Start N client processes (the dummy CartPole client unless --script names your own)\n"
                    "and show what each prints. Arguments after -- go to every copy.",
        epilog=CONTRACT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--address", required=True, help="HOST:PORT of the learner's directory or of a runner")
    p.add_argument("-n", "--num-clients", type=int, default=1, help="copies to run")
    p.add_argument("--script", type=Path, default=None,
                   help="client script (default: the bundled examples/dummy_cartpole_client.py)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="show only each copy's summary line, warnings and errors")
    p.add_argument("extra", nargs=argparse.REMAINDER, help="-- then arguments for every copy")


def _endpoints_parser(sub) -> None:
    p = sub.add_parser("endpoints", help="print every runner's address (ask a learner's directory, or read its output)")
    p.add_argument("output", nargs="?", default="runs/latest",
                   help="the learner's directory HOST:PORT (tls://HOST:PORT for TLS), or its --output folder")
    p.add_argument("--secret-file", default=None,
                   help="shared secret for a directory that requires one (or set RLINKS_SECRET)")
    p.add_argument("--ca-file", default=None, help="CA certificate to check a tls:// directory with")
    p.add_argument("--cert-file", default=None, help="client certificate, for a directory that wants one")
    p.add_argument("--key-file", default=None, help="key of --cert-file")


def _web_parser(sub) -> None:
    from .web import DEFAULT_LEARNER, DEFAULT_PORT

    p = sub.add_parser(
        "web",
        help="serve the web game (a CartPole page that trains in the browser) and the JavaScript client",
        description="Serve clients/js/web (the page) with the JavaScript client it loads, print the URL to open "
                    "and the learner command that lets the page in. Runs npm ci in clients/js first where its "
                    "dependency is missing. Ctrl-C stops it.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to serve on (default: this machine only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free one)")
    p.add_argument("--learner", default=DEFAULT_LEARNER, metavar="ADDRESS",
                   help=f"the learner the page connects to, ws://HOST:PORT or wss:// (default {DEFAULT_LEARNER})")
    p.add_argument("--js-dir", default=None, metavar="DIR",
                   help="the clients/js folder of a checkout (default: this checkout's; the wheel has none)")


def _demo_parser(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="PPO on CartPole with 2 runners and 4 dummy clients, to a mean return of 450",
        description="The main job: a learner with 2 EnvRunners, 4 dummy CartPole clients on this machine, "
                    "trained until the mean return reaches 450; writes runs/demo/learning_curve.png.",
    )
    p.add_argument("--output", default="runs/demo")
    p.add_argument("--port", type=int, default=None, help="base port (default 5555 from the config; 0: any free ports)")
    p.add_argument("--gpu-num", type=int, default=None, help="learners with one GPU each")
    p.add_argument("--stop-iters", type=int, default=None)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlinks", description="Train Ray RLlib on external simulators over TCP.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _learner_parser(sub)
    _record_parser(sub)
    _client_parser(sub)
    _endpoints_parser(sub)
    _web_parser(sub)
    _demo_parser(sub)
    return parser


def _learner(args) -> int:
    config = bundled.resolve_config(args.config)
    from .training.learner import LearnerOptions, run_learner

    return run_learner(LearnerOptions(
        config=str(config), host=args.host, port=args.port, num_env_runners=args.num_env_runners,
        gpu_num=args.gpu_num, num_learners=args.num_learners, stop_reward=args.stop_reward,
        stop_iters=args.stop_iters, checkpoint_every=args.checkpoint_every, output=args.output,
        resume=args.resume, input=args.input, ws_allowed_origins=tuple(args.ws_allowed_origin),
    ))


def _record(args) -> int:
    config = bundled.resolve_config(args.config)
    from .training.record import RecordOptions, run_record

    return run_record(RecordOptions(
        config=str(config), out=args.out, host=args.host, port=args.port, num_env_runners=args.num_env_runners,
        resume=args.resume, stop_steps=args.stop_steps, output=args.output,
    ))


def _client(args) -> int:
    from .training.clients import ClientProcesses

    extra = args.extra[1:] if args.extra[:1] == ["--"] else args.extra
    group = ClientProcesses(args.script or bundled.dummy_client(), [args.address] * args.num_clients, extra,
                            quiet=args.quiet)
    previous = signal.signal(signal.SIGTERM, _interrupt)  # stopped like Ctrl-C: the copies get SIGTERM
    try:
        codes = group.wait()
    except KeyboardInterrupt:
        group.stop()
        codes = [p.returncode or 0 for p in group.procs]
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0 if all(code == 0 for code in codes) else 1


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


def _endpoints(args) -> int:
    if ":" in args.output and not Path(args.output).exists():
        return _endpoints_from_directory(args)
    path = Path(args.output) / "endpoints.json"
    try:
        endpoints = json.loads(path.read_text())
    except OSError as exc:
        print(f"rlinks endpoints: no {path} ({exc.strerror}); is a learner running with --output {args.output}?",
              file=sys.stderr)
        return 1
    for entry in endpoints:
        print(f"runner {entry['worker_index']}: {entry['host']}:{entry['port']}")
    return 0


def _endpoints_from_directory(args) -> int:
    """Ask a running learner's directory (HOST:PORT) for its runners."""
    from .client import ClientError, ask_directory

    address = args.output
    try:
        endpoints = ask_directory(address, timeout=10.0, connect_timeout=10.0, secret_file=args.secret_file,
                                  ca_file=args.ca_file, cert_file=args.cert_file, key_file=args.key_file)
    except (ClientError, OSError, ValueError) as exc:
        print(f"rlinks endpoints: cannot ask {address}: {exc}", file=sys.stderr)
        return 1
    for entry in endpoints:
        clients = f" ({entry['clients']} clients)" if "clients" in entry else ""
        print(f"runner {entry.get('worker_index', '?')}: {entry['host']}:{entry['port']}{clients}")
    return 0


def _web(args) -> int:
    from . import web

    try:
        learner = web.learner_address(args.learner)
    except ValueError as exc:
        print(f"rlinks web: {exc}", file=sys.stderr)
        return 1
    folder = web.js_package(args.js_dir)
    try:
        server = web.WebServer(folder, args.host, args.port)
    except OSError as exc:
        print(f"rlinks web: can't serve on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with server:
            print(f"serving the web game from {folder} at {server.url}/", flush=True)
            print(f"open {web.page_url(args.host, server.port, learner)}", flush=True)
            print(f"with a learner that lets this page in: rlinks learner --config ppo_cartpole --port {learner.port} "
                  f"--ws-allowed-origin {server.url}", flush=True)
            if args.host in web.WILDCARD_HOSTS:
                print("from another machine: open it at this machine's name, let that origin in "
                      "(--ws-allowed-origin http://NAME:PORT) and give the learner --host 0.0.0.0", flush=True)
            print("Ctrl-C stops it", flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)


def _demo(args) -> int:
    from .training.clients import ClientProcesses, print_line
    from .training.learner import LearnerOptions, run_learner

    config = bundled.bundled_config(DEMO_CONFIG)
    groups: list[ClientProcesses] = []

    def start_clients(addresses: list[tuple[int, str, int]], directory: tuple[str, int] | None) -> None:
        if directory is not None:
            # Every client gets the one address; the directory spreads them over the runners.
            targets = [f"{directory[0]}:{directory[1]}"] * DEMO_CLIENTS
        else:
            runners = [f"{host}:{port}" for _, host, port in addresses]
            targets = [runners[i % len(runners)] for i in range(DEMO_CLIENTS)]
        print_line(f"starting {DEMO_CLIENTS} dummy CartPole clients against {', '.join(sorted(set(targets)))}")
        groups.append(ClientProcesses(bundled.dummy_client(), targets, quiet=True))

    try:
        code = run_learner(
            LearnerOptions(config=str(config), output=args.output, gpu_num=args.gpu_num,
                           stop_iters=args.stop_iters, port=args.port),
            on_ready=start_clients,
            print_fn=print_line,  # the live view shares stdout with the clients' summaries
        )
    finally:
        for group in groups:
            # The learner has stopped; its runners told every client so. Give them
            # a moment to print their summaries, then make sure none is left.
            try:
                group.wait(timeout=30)
            except Exception:  # noqa: BLE001 - a hung client must not hide the demo's result
                group.stop()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rlinks`` console script."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    handlers = {"learner": _learner, "record": _record, "client": _client, "endpoints": _endpoints, "web": _web,
                "demo": _demo}
    try:
        return handlers[args.command](args)
    except FileNotFoundError as exc:
        print(f"rlinks {args.command}: {exc}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in _LEARNER_MODULES:
            raise
        print(f"rlinks {args.command}: needs the learner's dependencies ({exc.name} is missing): "
              f"pip install 'rlinks-rllib[rllib]'", file=sys.stderr)
        return 1
    except ValueError as exc:
        # A ConfigFileError; its module imports yaml, so it is looked up only once loaded.
        config_file = sys.modules.get(f"{__package__}.training.config_file")
        if config_file is None or not isinstance(exc, config_file.ConfigFileError):
            raise
        print(f"rlinks {args.command}: {exc}", file=sys.stderr)
        return 1
