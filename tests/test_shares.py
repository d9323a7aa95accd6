"""Update shares that follow the clients (server/delivery/shares.py): the arithmetic, and reading the counts from a result."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("ray")

from rlinks_rllib.server.delivery.shares import clients_in, update_share  # noqa: E402


def test_a_runner_takes_the_part_of_the_update_its_clients_are_of_all():
    clients = {"w1": 4, "w2": 0}
    assert update_share(2000, 250, clients, "w1") == 2000
    assert update_share(2000, 250, clients, "w2") == 250  # never below one fragment
    assert update_share(2000, 250, {"w1": 1, "w2": 2}, "w1") == 667  # rounded up: the parts cover the update
    assert update_share(2000, 250, {"w1": 1, "w2": 2}, "w2") == 1334
    assert update_share(2000, 250, {"w1": 2, "w2": 2}, "w1") == 1000


def test_no_counts_for_a_runner_or_nobody_anywhere_keeps_its_share():
    assert update_share(2000, 250, {"w2": 3}, "w1") is None
    assert update_share(2000, 250, {"w1": 0, "w2": 0}, "w1") is None
    assert update_share(2000, 250, {}, "w1") is None


def test_counts_are_read_from_the_result_and_bad_values_skipped():
    result = {"env_runners": {"rlinks": {"clients_by_runner": {"w1": 3.0, "w2": math.nan, "w3": "x", "w4": 0,
                                                                  "w5": np.int64(2)}}}}
    assert clients_in(result) == {"w1": 3, "w4": 0, "w5": 2}
    assert clients_in({"env_runners": {}}) == {}
    assert clients_in({}) == {}
