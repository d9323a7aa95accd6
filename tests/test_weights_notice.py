"""``weights_notice``: the runner names its weights version in every ACK, and a local off-policy client follows it.

The protocol part with two Connections and the test vectors (a peer that did
not agree gets the plain ACK, byte for byte); the client's rule of when to ask
(:class:`~rlinks_rllib.client.inference.background_sender.WeightsSchedule`) with a clock passed in;
and a real runner in this process, whose weights change under a client that
runs the policy itself (PROTOCOL.md 10.2.1).
"""

from __future__ import annotations

import numpy as np
import pytest
from test_vectors import VECTORS

from rlinks_rllib.client.network.connection import WeightsNotice
from rlinks_rllib.client.inference.background_sender import WEIGHTS_POLL_S, WeightsSchedule
from rlinks_rllib.protocol.connection import Acked, Connection, EpisodesReceived, Role, State
from rlinks_rllib.protocol.errors import InvalidMessage, LocalProtocolError
from rlinks_rllib.protocol.extensions import Extension, Offer, negotiate
from rlinks_rllib.protocol.framing import encode_message
from rlinks_rllib.protocol.messages import validate_message

NOTICE = ("ack", "weights_notice")
EPISODE = {"id_": "e1", "observations": np.zeros((3, 4), np.float32), "actions": np.array([0, 1]),
           "rewards": [1.0, 1.0]}

# --- the protocol ------------------------------------------------------------------------


def _pair(client_ext, server_ext) -> tuple[Connection, Connection]:
    client = Connection(Role.CLIENT, extensions=client_ext, client_id="sim-1")
    server = Connection(Role.SERVER, extensions=server_ext)
    client.start()
    server.receive_data(b"".join(client.data_to_send()))
    assert server.next_event() is not None
    client.receive_data(b"".join(server.data_to_send()))
    assert client.next_event() is not None and client.state is State.READY
    return client, server


def _sent_batch(client: Connection, server: Connection) -> int:
    batch = client.send_episodes([EPISODE], steps=2, timesteps=2, on_policy=False)
    server.receive_data(b"".join(client.data_to_send()))
    event = server.next_event()
    assert isinstance(event, EpisodesReceived) and event.seq == batch.seq
    return batch.seq


def _acked(client: Connection, server: Connection) -> Acked:
    client.receive_data(b"".join(server.data_to_send()))
    event = client.next_event()
    assert isinstance(event, Acked)
    return event


def test_an_ack_names_the_weights_version_when_both_agreed():
    client, server = _pair(NOTICE, NOTICE)
    assert server.speaks(Extension.WEIGHTS_NOTICE) and client.speaks(Extension.WEIGHTS_NOTICE)
    seq = _sent_batch(client, server)
    server.send_ack(seq, weights_seq_no=42)
    event = _acked(client, server)
    assert event.seq == seq and event.batch is not None and event.weights_seq_no == 42


@pytest.mark.parametrize("offered", [("ack",), NOTICE])
def test_a_client_that_did_not_agree_gets_the_plain_ack_byte_for_byte(offered):
    """RLlib-compatible bytes (the ``valid_ack`` vector) for any client that did not agree, whoever offered what."""
    server_ext = ("ack",) if offered == NOTICE else NOTICE
    client, server = _pair(offered, server_ext)
    assert not server.speaks(Extension.WEIGHTS_NOTICE)
    for _ in range(7):
        _sent_batch(client, server)
    server.send_ack(7)
    sent = b"".join(server.data_to_send())
    assert sent == (VECTORS / "valid_ack.bin").read_bytes()
    client.receive_data(sent)
    assert client.next_event().weights_seq_no is None
    with pytest.raises(LocalProtocolError, match="weights_notice"):
        server.send_ack(7, weights_seq_no=3)


def test_an_agreed_ack_must_name_the_version():
    client, server = _pair(NOTICE, NOTICE)
    with pytest.raises(LocalProtocolError, match="weights_notice"):
        server.send_ack(1)
    assert server.data_to_send() == []


def test_a_client_that_did_not_agree_ignores_a_version_sent_anyway():
    client, _ = _pair(("ack",), NOTICE)
    client.send_episodes([EPISODE], steps=2, timesteps=2, on_policy=False)
    client.receive_data(encode_message({"type": "ACK", "seq": 1, "weights_seq_no": 9}))
    event = client.next_event()
    assert isinstance(event, Acked) and event.weights_seq_no is None


def test_weights_notice_is_agreed_only_with_ack():
    offer = Offer(version=1, extensions=frozenset({"weights_notice", "want_steps"}))
    assert negotiate(offer, NOTICE + ("want_steps",)) == {"want_steps"}
    client, server = _pair(("weights_notice",), NOTICE)
    assert not client.speaks(Extension.WEIGHTS_NOTICE) and not server.speaks(Extension.WEIGHTS_NOTICE)


@pytest.mark.parametrize("value", [-1, "7", 1.5, True, None])
def test_a_bad_version_in_an_ack_is_refused(value):
    with pytest.raises(InvalidMessage, match="weights_seq_no"):
        validate_message({"type": "ACK", "seq": 1, "weights_seq_no": value})


# --- when the client asks -------------------------------------------------------------------


def test_with_notices_the_client_asks_as_soon_as_a_newer_version_is_named_and_not_otherwise():
    schedule = WeightsSchedule(None, weights_seq_no=5, now=100.0)
    assert not schedule.due(100.0, True, None)
    assert not schedule.due(100.5, True, WeightsNotice(5, at=100.4))  # nothing new: no request, no SET_STATE
    assert schedule.due(100.5, True, WeightsNotice(6, at=100.5))  # newer: at once, no timer
    schedule.got(6, 100.5)
    assert not schedule.due(100.6, True, WeightsNotice(6, at=100.6))
    assert not schedule.due(100.6, True, WeightsNotice(4, at=100.6))  # a runner behind (after a move): not newer


def test_with_notices_but_none_heard_for_a_while_the_client_asks_anyway():
    """A client whose batches are not taken (or that sends rarely) hears no ACK: the timer is the fallback."""
    schedule = WeightsSchedule(None, weights_seq_no=5, now=100.0)
    assert not schedule.due(100.0 + WEIGHTS_POLL_S / 2, True, None)
    assert schedule.due(100.0 + WEIGHTS_POLL_S, True, None)
    heard = WeightsNotice(5, at=100.0 + WEIGHTS_POLL_S / 2)
    assert not schedule.due(100.0 + WEIGHTS_POLL_S, True, heard)
    assert schedule.due(heard.at + WEIGHTS_POLL_S, True, heard)


def test_without_notices_the_client_polls_as_before():
    schedule = WeightsSchedule(None, weights_seq_no=0, now=0.0)
    assert not schedule.due(WEIGHTS_POLL_S / 2, False, None) and schedule.due(WEIGHTS_POLL_S, False, None)
    explicit = WeightsSchedule(0.0, weights_seq_no=0, now=0.0)  # PolicyClient(update_interval=None): every batch
    assert explicit.due(0.0, False, None)


def test_weights_every_s_is_the_floor_between_two_requests():
    schedule = WeightsSchedule(2.0, weights_seq_no=0, now=0.0)
    assert not schedule.due(1.0, True, WeightsNotice(1, at=1.0))
    assert schedule.due(2.0, True, WeightsNotice(1, at=1.0))
    assert schedule.silence_s == 2.0 and schedule.poll_s == 2.0


# --- a real runner ----------------------------------------------------------------------


def _dqn_runner():
    from ray.rllib.algorithms.dqn import DQNConfig

    from harness import CARTPOLE
    from rlinks_rllib import RLinkEnvRunner

    config = DQNConfig().environment(
        observation_space=CARTPOLE.observation_space, action_space=CARTPOLE.action_space,
        env_config={"port": 0},
    ).env_runners(num_env_runners=0, rollout_fragment_length=5, sample_timeout_s=2.0)
    return RLinkEnvRunner(config=config, worker_index=0)


def _new_weights(runner, seq_no: int) -> None:
    from ray.rllib.core import COMPONENT_RL_MODULE
    from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO

    runner.set_state({COMPONENT_RL_MODULE: runner.module.get_state(), WEIGHTS_SEQ_NO: seq_no})


def _take_all(runner, steps: int) -> None:
    """sample() until the runner has handed over ``steps`` in all (and confirmed them); bounded."""
    for _ in range(50):
        if runner.num_env_steps_sampled_lifetime >= steps:
            return
        runner.sample()
    raise AssertionError(f"the runner took {runner.num_env_steps_sampled_lifetime} of {steps} steps")


@pytest.mark.timeout(120)
def test_the_runners_acks_name_its_weights_as_they_change(ray_local):
    from rlinks_rllib.client import RLinkClient
    from rlinks_rllib.protocol.episode_builder import EpisodeBuilder

    runner = _dqn_runner()
    builder = EpisodeBuilder()
    rng = np.random.default_rng(0)

    def chunks(steps: int) -> list:
        for _ in range(steps):
            if builder.episode_id is None:
                builder.reset(rng.normal(size=4).astype(np.float32))
            builder.step(int(rng.integers(2)), 1.0, rng.normal(size=4).astype(np.float32), False, False,
                         extra={"action_logp": np.float32(-0.69), "action_dist_inputs": np.zeros(2, np.float32)})
        return builder.take_chunks()

    try:
        with RLinkClient("127.0.0.1:%d" % runner.address[1], timeout=30.0) as client:
            assert client.get_state().seq_no == 0
            assert "weights_notice" in client.server_extensions
            client.send_episodes(chunks(5))
            _take_all(runner, 5)
            client.flush()
            assert client.weights_notice.seq_no == 0
            _new_weights(runner, 1)
            client.send_episodes(chunks(5))
            _take_all(runner, 10)
            client.flush()
            assert client.weights_notice.seq_no == 1 and client.get_state().seq_no == 1
        with RLinkClient("127.0.0.1:%d" % runner.address[1], timeout=30.0, extensions=("ack",)) as plain:
            plain.send_episodes(chunks(5))
            _take_all(runner, 15)
            plain.flush()
            assert plain.weights_notice is None  # it did not ask: plain ACKs
    finally:
        runner.stop()


@pytest.mark.timeout(120)
def test_a_local_off_policy_client_follows_new_weights_within_one_sync(ray_local):
    """The client asks for the new weights at the first batch it sends after an ACK named them, not on a timer."""
    from rlinks_rllib.client import EnvClient

    runner = _dqn_runner()
    obs = np.zeros(4, np.float32)
    try:
        with EnvClient("127.0.0.1:%d" % runner.address[1], on_policy=False, timeout=30.0) as env:

            def play(steps: int) -> None:
                for _ in range(steps):
                    env.act(obs)
                    env.report(1.0, obs)

            play(10)
            _take_all(runner, 10)
            assert env.stats.weights_seq_no == 0
            for version in (1, 2, 3):
                _new_weights(runner, version)
                # One sync: the next batch taken is confirmed with an ACK naming the version, read when the
                # client sends a batch after it arrived, which then asks for the weights; the act after takes
                # them (3 to 5 rounds here, however long a round takes; polling would wait out its timer).
                rounds = 0
                while env.stats.weights_seq_no != version and rounds < 20:
                    rounds += 1
                    play(5)
                    _take_all(runner, env.stats.steps)
                assert env.stats.weights_seq_no == version, (version, rounds)
    finally:
        runner.stop()
