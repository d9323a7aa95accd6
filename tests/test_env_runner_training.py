"""RLinkEnvRunner trains real RLlib algorithms with real clients over loopback."""

from __future__ import annotations

import math

import pytest

from harness import (
    dummy_client_cmd,
    episode_return,
    ppo_config,
    processes,
    rlinks_metrics,
    rllib_client_cmd,
    running,
    train,
    wait_for_clients,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_ppo_two_runners_two_clients_each_reaches_150(ray_local):
    from rlinks_rllib.server.env_runner import runner_addresses

    with running(ppo_config(num_env_runners=2).build_algo()) as algo:
        addresses = runner_addresses(algo)
        assert [index for index, _, _ in addresses] == [1, 2]
        commands = [dummy_client_cmd(host, port) for _, host, port in addresses for _ in range(2)]
        with processes(commands):
            wait_for_clients(algo, 2)
            results = train(algo, 40, stop_return=150)
    assert episode_return(results[-1]) >= 150, [episode_return(r) for r in results]
    lags = [rlinks_metrics(r).get("policy_lag_max", 0) for r in results]
    assert max(lags) == 0, lags
    assert rlinks_metrics(results[-1])["clients_connected"] == 2  # per runner (max over runners)


def test_rllib_own_dummy_client_trains_against_our_runner(ray_local):
    """RLlib's unmodified client: it unpickles the config, so the runner must opt in."""
    config = ppo_config(num_env_runners=1, train_batch=1000, env_config={"unsafe_pickle_config": True})
    with running(config.build_algo()) as algo:
        from rlinks_rllib.server.env_runner import runner_addresses

        (_, _, port), = runner_addresses(algo)
        with processes([rllib_client_cmd(port)]):
            results = train(algo, 30, stop_return=100)
    assert episode_return(results[-1]) >= 100, [episode_return(r) for r in results]


def test_batches_smaller_than_an_update_do_not_deadlock(ray_local):
    """The case that freezes RLlib's own server: each client batch is a tenth of an update."""
    config = ppo_config(num_env_runners=1, train_batch=500, env_config={"unsafe_pickle_config": True},
                        minibatch_size=100)
    config.env_runners(rollout_fragment_length=50)
    with running(config.build_algo()) as algo:
        from rlinks_rllib.server.env_runner import runner_addresses

        (_, _, port), = runner_addresses(algo)
        with processes([rllib_client_cmd(port)]):
            results = train(algo, 4)
    sampled = [r["env_runners"]["num_env_steps_sampled_lifetime"] for r in results]
    assert all(b - a >= 500 for a, b in zip([0] + sampled, sampled)), sampled


def test_eight_of_our_clients_on_one_runner_keep_lag_zero_and_lose_nothing(ray_local):
    from rlinks_rllib.server.env_runner import runner_addresses

    with running(ppo_config(num_env_runners=1).build_algo()) as algo:
        (_, host, port), = runner_addresses(algo)
        with processes([dummy_client_cmd(host, port) for _ in range(8)]):
            wait_for_clients(algo, 8)
            results = train(algo, 5)
            stats = algo.env_runner_group.foreach_env_runner(lambda r: r.get_transport_stats(),
                                                             local_env_runner=False)[0]
    lags = [rlinks_metrics(r).get("policy_lag_max", 0) for r in results]
    assert max(lags) == 0, lags
    sampled = results[-1]["env_runners"]["num_env_steps_sampled_lifetime"]
    assert stats["dropped_stale_steps"] == 0
    # Every step a client sent was either trained on or still waits in the inbox.
    assert stats["steps_in"] == sampled + stats["inbox_steps"]
    assert stats["errors_total"] == 0
    assert all(not math.isnan(episode_return(r)) for r in results[1:])
