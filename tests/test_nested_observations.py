"""Dict and Tuple observations on a live runner: good chunks reach the inbox, bad ones are named by key path."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlinks_rllib.client import RLinkClient, ServerError
from rlinks_rllib.protocol.episode_builder import EpisodeBuilder
from rlinks_rllib.protocol.config import build_config
from rlinks_rllib.protocol.episodes import build_episode_state
from rlinks_rllib.protocol.spaces import describe_space
from rlinks_rllib.server.ingest.episodes import EpisodeIngest
from rlinks_rllib.server.errors import IngestError
from rlinks_rllib.server.network.listener import RLinkServer
from rlinks_rllib.server.settings import RLinkSettings

SPACE = gym.spaces.Dict(
    {
        "camera": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
        "depth": gym.spaces.Box(0.0, 10.0, (4, 4), np.float32),
        "state": gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,), np.float32))),
    }
)
ACTIONS = gym.spaces.Discrete(2)
STEPS = 5


def observations(steps=STEPS + 1, **change):
    SPACE.seed(0)
    samples = [SPACE.sample() for _ in range(steps)]
    obs = {
        "camera": np.stack([s["camera"] for s in samples]),
        "depth": np.stack([s["depth"] for s in samples]),
        "state": [np.array([s["state"][0] for s in samples]), np.stack([s["state"][1] for s in samples])],
    }
    obs.update(change)
    return obs


def chunk(obs, name="e"):
    return build_episode_state(name, obs, np.zeros(STEPS, np.int64), np.ones(STEPS, np.float32),
                               extra_model_outputs={"action_logp": np.zeros(STEPS, np.float32),
                                                    "action_dist_inputs": np.zeros((STEPS, 2), np.float32)})


def nan_depth():
    depth = observations()["depth"].copy()
    depth[3, 1, 1] = np.nan
    return depth


BAD = {
    "missing key": (dict(depth=None), r"observations\['depth'\]: missing key"),
    "extra key": (dict(lidar=np.zeros((STEPS + 1, 3), np.float32)), r"observations\['lidar'\]: unexpected key"),
    "dtype": (dict(camera=np.zeros((STEPS + 1, 8, 8, 3), np.float32)), r"observations\['camera'\]: dtype <f4"),
    "shape": (dict(camera=np.zeros((STEPS + 1, 8, 8), np.uint8)), r"observations\['camera'\]: shape"),
    "nan": (dict(depth=nan_depth()), r"observations\['depth'\]: NaN"),
    "range": (dict(state=[np.full(STEPS + 1, 3), np.zeros((STEPS + 1, 2), np.float32)]),
              r"observations\['state'\]\[0\]: value out of the discrete"),
}


def bad_observations(case):
    change, message = BAD[case]
    obs = observations(**change)
    if change.get("depth", 0) is None:
        del obs["depth"]
    return obs, message


def test_ingest_takes_both_forms_and_casts_to_the_space():
    ingest = EpisodeIngest(SPACE, ACTIONS, RLinkSettings())
    obs = observations()
    obs["depth"] = obs["depth"].astype(np.float64)  # casts within its kind: accepted, stored as the space's
    [episode], steps = ingest([chunk(obs)])
    assert steps == STEPS and episode.get_observations(0)["depth"].dtype == np.float32
    # RLlib's per-step list form: one dict per step (a Dict of boxes; tuples inside need the stacked form).
    flat = gym.spaces.Dict({"camera": SPACE["camera"], "depth": SPACE["depth"]})
    per_step = [{"camera": obs["camera"][t], "depth": obs["depth"][t]} for t in range(STEPS + 1)]
    state = chunk(obs)
    state["observations"] = {"data": per_step, "lookback": 0, "finalized": False, "space": None}
    [episode], _ = EpisodeIngest(flat, ACTIONS, RLinkSettings())([state])
    assert episode.get_observations(-1)["camera"].shape == (8, 8, 3)
    per_step[2]["depth"] = per_step[2]["depth"][:2]
    with pytest.raises(IngestError, match=r"observations"):
        EpisodeIngest(flat, ACTIONS, RLinkSettings())([state])


@pytest.mark.parametrize("case", sorted(BAD))
def test_ingest_names_the_key_path(case):
    obs, message = bad_observations(case)
    with pytest.raises(IngestError, match=r"episodes\[1\]: " + message):
        EpisodeIngest(SPACE, ACTIONS, RLinkSettings())([chunk(observations()), chunk(obs)])


def _ingest_fn():
    return EpisodeIngest(SPACE, ACTIONS, RLinkSettings())


@pytest.fixture
def server():
    description = build_config(algorithm="PPO", observation_space=describe_space(SPACE),
                               action_space=describe_space(ACTIONS), rollout_fragment_length=STEPS,
                               on_policy=False, model_config={})
    server = RLinkServer(RLinkSettings(port=0), port=0, ingest=_ingest_fn(),
                         config_message=lambda _with_graph: {"type": "SET_CONFIG", "config": description},
                         update_steps=STEPS, on_policy=False)
    server.replace_weights({"w": np.zeros(2, np.float32)}, 1)
    server.start()
    yield server
    server.stop()


@pytest.mark.timeout(60)
def test_a_bad_key_ends_that_client_only(server):
    address = f"127.0.0.1:{server.address[1]}"
    with RLinkClient(address, timeout=10) as good, RLinkClient(address, timeout=10) as bad:
        assert good.get_config()["observation_space"]["kind"] == "dict"
        obs, message = bad_observations("dtype")
        bad.send_episodes([chunk(obs, "bad")])
        with pytest.raises(ServerError, match=message) as info:
            bad.flush()
        assert info.value.code == "bad_episode"
        # Built the way a simulator builds them: the episode builder, one dict per step.
        builder = EpisodeBuilder()
        SPACE.seed(1)
        builder.reset(SPACE.sample())
        for _ in range(STEPS):
            value = SPACE.sample()
            value["state"] = tuple(value["state"])
            builder.step(0, 1.0, value, extra={"action_logp": np.float32(0), "action_dist_inputs": np.zeros(2, np.float32)})
        good.send_episodes(builder.take_chunks())
        batches = server.inbox.take(STEPS, 5.0)
        server.confirm(batches)  # what sample() does; then the ACK comes
        good.flush()
    assert sum(batch.steps for batch in batches) == STEPS
