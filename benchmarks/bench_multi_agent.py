"""Multi-agent ingest: agent steps per second one runner's ``sample()`` hands RLlib, beside single-agent.

Both runners are our ``RLinkEnvRunner``, built in-process from a ``PPOConfig``
(no Algorithm, no Ray cluster), fed by sender processes that each write one
pre-built ``EPISODES`` frame over and over (``bench_ingest``'s senders), and
drained by ``sample()`` + ``get_metrics()`` in a loop as a training step does:

a. single-agent: CartPole-shaped steps in our client's format (stacked
   chunks of ~22-step episodes), 500 agent steps per frame;
b. multi-agent: the same 500 agent steps as multi-agent chunks from
   ``MultiAgentEpisodeBuilder``: 4 agents per tick (two modules by an agent
   mapping table) over 125 ticks, ~22-tick episodes, every agent with
   CartPole-shaped observations; ``sample()`` returns ``MultiAgentEpisode``s.

Counted: agent steps returned per second (for single-agent, agent steps =
env steps). The ratio multi/single says what the multi-agent wire form, its
checks and building RLlib's ``MultiAgentEpisode`` cost per agent step. Each
run of a case is a fresh process; cases run round-robin ``--rounds`` times
and each ratio is the median of the per-round ratios. Usage::

    python benchmarks/bench_multi_agent.py [--quick] [--rounds N] [--window S]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    MB,
    Payload,
    cartpole_payloads,
    median,
    median_ratio,
    now,
    print_table,
    run_in_process,
    stop_processes,
)
from bench_ingest import _PING, Sender, Timing, _quiet, _sender  # noqa: E402
from rlinks_rllib.protocol import encode_message  # noqa: E402
from rlinks_rllib.protocol.agent_mapping import AgentMapping  # noqa: E402
from rlinks_rllib.protocol.multi_agent_builder import ALL, MultiAgentEpisodeBuilder  # noqa: E402

AGENT_STEPS_PER_MESSAGE = 500
AGENTS = ("a_0", "a_1", "b_0", "b_1")
MAPPING = AgentMapping([["a_*", "module_a"], ["b_*", "module_b"]])
EPISODE_TICKS = 22
#: Agent steps one sample() call waits for (as bench_ingest's CartPole fragment).
FRAGMENT_AGENT_STEPS = 4000
CLIENT_COUNTS = (1, 4)
SAMPLE_TIMEOUT_S = 4.0
CASE_SLACK_S = 60.0


def multi_agent_payload(agent_steps: int, seed: int = 0) -> Payload:
    """``agent_steps`` steps of len(AGENTS) agents acting every tick, as multi-agent chunks in one EPISODES frame."""
    rng = np.random.default_rng(seed)
    builder = MultiAgentEpisodeBuilder(module_for=MAPPING.module_for)

    def obs() -> dict:
        return {a: rng.standard_normal(4).astype(np.float32) for a in AGENTS}

    builder.reset(obs())
    ticks = agent_steps // len(AGENTS)
    for t in range(1, ticks + 1):
        logits = rng.standard_normal((len(AGENTS), 2)).astype(np.float32)
        actions = {a: int(rng.integers(2)) for a in AGENTS}
        extras = {a: {"action_logp": np.float32(-0.69), "action_dist_inputs": logits[i]} for i, a in enumerate(AGENTS)}
        done = t % EPISODE_TICKS == 0
        builder.step(actions, {a: 1.0 for a in AGENTS}, obs(), {ALL: done}, {ALL: False}, extras)
        if done and t < ticks:
            builder.reset(obs())
    chunks = builder.take_chunks()
    assert builder.agent_steps_total == agent_steps
    frame = encode_message({"type": "EPISODES", "episodes": chunks, "timesteps": builder.env_steps_total})
    return Payload(f"{len(AGENTS)} agents x {ticks} ticks, multi-agent chunks, our format", frame, agent_steps,
                   len(chunks))


def _config(multi_agent: bool):
    import gymnasium as gym
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.policy.policy import PolicySpec

    obs, act = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2)
    config = PPOConfig().environment(observation_space=obs, action_space=act, env_config={"port": 0})
    fragment = FRAGMENT_AGENT_STEPS
    if multi_agent:
        config.multi_agent(policies={m: PolicySpec(observation_space=obs, action_space=act)
                                     for m in sorted(MAPPING.module_ids)}, policy_mapping_fn=MAPPING)
        fragment //= len(AGENTS)  # env steps (RLlib's default count_steps_by)
    return config.env_runners(num_env_runners=0, rollout_fragment_length=fragment, sample_timeout_s=SAMPLE_TIMEOUT_S)


def _case_main(multi_agent: bool, clients: int, payload: Payload, timing: Timing, result) -> None:
    os.setpgid(0, 0)
    _quiet()
    ctx = mp.get_context("fork")
    port = ctx.Value("i", 0, lock=False)
    go, stop = ctx.Event(), ctx.Event()
    senders = [ctx.Process(target=_sender, args=(Sender(payload.frame, _PING), port, go, stop), daemon=True)
               for _ in range(clients)]
    for proc in senders:
        proc.start()
    runner = None
    try:
        from rlinks_rllib.server.env_runner import RLinkEnvRunner

        runner = RLinkEnvRunner(config=_config(multi_agent), worker_index=0)
        port.value = runner.address[1]
        go.set()
        count = (lambda e: e.agent_steps()) if multi_agent else len
        end = now() + timing.warmup_s
        while now() < end:
            runner.sample()
            runner.get_metrics()
        steps, start, cpu = 0, now(), os.times()
        while now() - start < timing.window_s:
            steps += sum(count(e) for e in runner.sample())
            runner.get_metrics()
        seconds, cpu_s = now() - start, os.times().user - cpu.user + os.times().system - cpu.system
        refused = runner.get_transport_stats().get("errors_total", 0)
        result.send({"steps": steps, "seconds": seconds, "cpu": cpu_s, "refused": refused})
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which prints it
        result.send({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        stop.set()
        go.set()
        if runner is not None:
            runner.stop()
        stop_processes(senders, timeout=5.0)


def run_case(multi_agent: bool, clients: int, payload: Payload, timing: Timing) -> dict:
    """One run of one case in a fresh process: its result or ``{"error": ...}``."""
    return run_in_process(_case_main, (multi_agent, clients, payload, timing),
                          timing.warmup_s + timing.window_s + CASE_SLACK_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one short round (smoke test)")
    parser.add_argument("--rounds", type=int, default=None, help="round-robin rounds (median taken)")
    parser.add_argument("--window", type=float, default=None, help="seconds measured per case per round")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    timing = Timing(warmup_s=0.3 if args.quick else 0.6, window_s=args.window or (0.6 if args.quick else 2.0))
    _, single = cartpole_payloads(AGENT_STEPS_PER_MESSAGE)
    multi = multi_agent_payload(AGENT_STEPS_PER_MESSAGE)
    print(f"bench_multi_agent: agent steps/s returned by one runner's sample() (+ get_metrics()) while sender "
          f"processes blast EPISODES frames; median of {rounds} round(s) of {timing.window_s:g} s after "
          f"{timing.warmup_s:g} s warm-up; {os.cpu_count()} CPUs")
    for p in (single, multi):
        print(f"  payload: {p.name}: {p.steps} agent steps, {p.episodes} episode chunk(s), "
              f"frame {len(p.frame) / MB:.3f} MB ({p.bytes_per_step:,.0f} B/agent step)")
    cases = [(kind, n) for n in CLIENT_COUNTS for kind in ("single", "multi")]
    rates: dict = {case: [] for case in cases}
    per_cpu: dict = {case: [] for case in cases}
    problems = {}
    for _ in range(rounds):
        for kind, n in cases:
            res = run_case(kind == "multi", n, multi if kind == "multi" else single, timing)
            if "error" in res or res.get("refused"):
                problems[(kind, n)] = res.get("error") or f"the runner refused {res['refused']} message(s)"
                rates[(kind, n)].append(float("nan"))
                per_cpu[(kind, n)].append(float("nan"))
                continue
            rates[(kind, n)].append(res["steps"] / res["seconds"])
            per_cpu[(kind, n)].append(res["steps"] / res["cpu"] if res["cpu"] else float("nan"))
    print_table(["case", "clients", "agent steps/s", "agent steps/CPU-s"],
                [[f"{kind}-agent", n, median(rates[(kind, n)]), median(per_cpu[(kind, n)])] for kind, n in cases])
    for case, problem in problems.items():
        print(f"  ERROR in {case}: {problem}")
    for n in CLIENT_COUNTS:
        ratio = median_ratio(rates[("multi", n)], rates[("single", n)])
        ratio_cpu = median_ratio(per_cpu[("multi", n)], per_cpu[("single", n)])
        print(f"ratio multi-agent/single-agent agent steps/s, {n} client(s): {ratio:.2f}x "
              f"(per CPU-s {ratio_cpu:.2f}x)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
