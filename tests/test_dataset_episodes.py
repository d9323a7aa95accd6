"""EnvClient simulators into RLinkDataset, and RLinkSyncModel reaching them (issue #22).

Real sockets on 127.0.0.1 (OS-chosen ports), real EnvClients stepping real
CartPoles, real torch and RLlib modules, onnxruntime for the policy graph. No
Ray cluster: the dataset lives in this process, as in a user's loop.
"""

from __future__ import annotations

import collections
import logging
import socket
import threading

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rlinks_rllib.client import EnvClient  # noqa: E402
from rlinks_rllib.client.actor import RLinkActor  # noqa: E402
from rlinks_rllib.client.errors import ServerError  # noqa: E402
from rlinks_rllib.protocol.connection import Connection, ErrorReceived, HandshakeDone, Role  # noqa: E402
from rlinks_rllib.protocol.episodes import build_episode_state  # noqa: E402
from rlinks_rllib.protocol.extensions import Extension  # noqa: E402
from rlinks_rllib.dataset import EPISODE, TRANSITIONS, RLinkDataset, RLinkSyncModel  # noqa: E402
from test_samples import Relay  # noqa: E402

pytestmark = pytest.mark.timeout(120)

SMALL = {"fcnet_hiddens": [16, 16]}


def play(client: EnvClient, steps: int, seed: int, check=None) -> None:
    """Step a CartPole ``steps`` times through ``client``; ``check(obs, action)`` after each act."""
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=seed)
    client.start_episode(obs)  # one left running by an earlier call ends here, as truncated
    for _ in range(steps):
        action = client.act(obs)
        if check is not None:
            check(obs, action)
        obs, reward, terminated, truncated, _ = env.step(action)
        client.report(reward, obs, terminated, truncated)
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()


def greedy(module: torch.nn.Module, obs: np.ndarray) -> int:
    """The torch module's own greedy action (an RLModule's or a plain policy's ``action_dist_inputs``)."""
    with torch.no_grad():
        batch = torch.as_tensor(obs, dtype=torch.float32)[None]
        if hasattr(module, "forward_inference"):
            logits = module.forward_inference({"obs": batch})["action_dist_inputs"]
        else:
            logits = module(batch)
    return int(logits.argmax(-1)[0])


def plays_as(client: EnvClient, module: torch.nn.Module, steps: int, seed: int) -> bool:
    """Play ``steps`` greedily; whether every action was the torch module's own greedy action."""
    same: list[bool] = []
    play(client, steps, seed, check=lambda obs, action: same.append(int(action) == greedy(module, obs)))
    return len(same) == steps and all(same)


def synced(sync: RLinkSyncModel, module: torch.nn.Module, client: EnvClient) -> int:
    """Sync ``module`` and have ``client`` fetch it now; the version the client acts with."""
    sync.sync(module)
    client.refresh_weights()
    return client.stats.weights_seq_no


def train_step(module: torch.nn.Module, chunk: dict) -> None:
    """A tiny user loop's update: imitate the opposite of what was played (moves the weights for sure)."""
    logits = (module.forward_train({"obs": chunk["obs"][:-1]})["action_dist_inputs"]
              if hasattr(module, "forward_train") else module(chunk["obs"]))
    loss = torch.nn.functional.cross_entropy(logits, 1 - chunk["actions"])
    optimizer = torch.optim.SGD(module.parameters(), lr=0.5)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def read_until(dataset: RLinkDataset, steps: int) -> list[dict]:
    """Chunks from ``dataset`` until they hold ``steps`` env steps (bounded by its ``idle_timeout``)."""
    chunks, held = [], 0
    for chunk in dataset:
        chunks.append(chunk)
        held += len(chunk["rewards"])
        if held >= steps:
            break
    return chunks


def reading(dataset: RLinkDataset, steps: int) -> tuple[threading.Thread, list[dict]]:
    """A thread reading ``steps`` env steps of chunks (a client's close waits for the consumer's ACKs)."""
    chunks: list[dict] = []
    thread = threading.Thread(target=lambda: chunks.extend(read_until(dataset, steps)))
    thread.start()
    return thread, chunks


def test_episodes_arrive_whole_and_once_across_a_dropped_connection():
    dataset = RLinkDataset(env="CartPole-v1", model_config=SMALL, fragment_steps=40, idle_timeout=3,
                           max_buffer_samples=8)
    RLinkSyncModel(dataset).sync(dataset.default_module("PPO"))
    relay = Relay(("127.0.0.1", dataset.port))
    got: list[dict] = []
    reader = threading.Thread(target=lambda: got.extend(dataset))
    reader.start()
    clients = [EnvClient(relay.address, timeout=20, seed=i, retry_attempts=20, backoff_initial=0.05) for i in range(2)]
    players = [threading.Thread(target=play, args=(client, 300, i)) for i, client in enumerate(clients)]
    try:
        for thread in players:
            thread.start()
        # Cut every connection once the first chunks are in, while both still play.
        for _ in range(600):
            if dataset.server.stats.episodes_received:
                break
            reader.join(0.05)
        relay.cut()
        for thread in players:
            thread.join(60)
        for client in clients:
            client.close()  # sends what is recorded and waits for its ACKs
        reader.join(30)
        assert not reader.is_alive()
        assert sum(c.stats.delivery.reconnects for c in clients) >= 1
        assert all(chunk["kind"] == EPISODE for chunk in got)
        # Once: no chunk twice; whole: every episode's chunks follow on from each other.
        assert len({(c["eps_id"], c["t_started"]) for c in got}) == len(got)
        episodes = collections.defaultdict(list)
        for chunk in got:
            episodes[chunk["eps_id"]].append(chunk)
        for chunks in episodes.values():
            chunks.sort(key=lambda c: c["t_started"])
            assert chunks[0]["t_started"] == 0
            for before, after in zip(chunks, chunks[1:]):
                assert after["t_started"] == before["t_started"] + len(before["rewards"])
                assert torch.equal(after["obs"][0], before["obs"][-1])
                assert not before["terminated"] and not before["truncated"]
            for chunk in chunks:
                steps = len(chunk["rewards"])
                assert chunk["obs"].shape == (steps + 1, 4) and chunk["actions"].shape == (steps,)
                assert chunk["action_logp"].shape == (steps,) and chunk["action_dist_inputs"].shape == (steps, 2)
        assert sum(len(c["rewards"]) for c in got) == sum(c.stats.steps for c in clients) == 600
        ended = sum(1 for c in got if c["terminated"] or c["truncated"])
        assert ended == sum(c.stats.episodes for c in clients)
    finally:
        for client in clients:
            client.close(flush=False)
        relay.close()
        dataset.close()


def test_default_mlp_sync_clients_act_with_exactly_that_module():
    dataset = RLinkDataset(env="CartPole-v1", model_config=SMALL, fragment_steps=50, idle_timeout=20)
    module = dataset.default_module("PPO")
    sync = RLinkSyncModel(dataset)
    assert sync.sync(module) == 1
    client = EnvClient(dataset.address, explore=False, timeout=20, weights_every_s=60)
    try:
        assert plays_as(client, module, 100, 0)
        assert client.mode == "local" and type(client.policy).__name__ == "NumpyPolicy"
        assert client.stats.weights_seq_no == 1
        before = {name: value.clone() for name, value in module.state_dict().items()}
        for chunk in read_until(dataset, 50):
            train_step(module, chunk)
        assert synced(sync, module, client) == 2
        assert plays_as(client, module, 100, 1)
        assert any(not torch.equal(before[name], value) for name, value in module.state_dict().items())
    finally:
        client.close(flush=False)
        dataset.close()


def test_custom_module_goes_as_policy_graph_and_actors_still_get_it():
    pytest.importorskip("onnxruntime")
    dataset = RLinkDataset(env="CartPole-v1", fragment_steps=50, idle_timeout=20, episodes=TRANSITIONS)
    net = torch.nn.Sequential(torch.nn.Linear(4, 24), torch.nn.ReLU(), torch.nn.Linear(24, 2))
    sync = RLinkSyncModel(dataset)
    assert sync.sync(net) == 1 and dataset.server.model.uses_graph
    client = EnvClient(dataset.address, explore=False, timeout=20, weights_every_s=60)
    actor = RLinkActor(dataset.address, timeout=20)
    try:
        assert plays_as(client, net, 80, 0)
        assert type(client.policy).__name__ == "OnnxPolicy"
        for chunk in read_until(dataset, 50):
            assert chunk["kind"] == TRANSITIONS
            steps = len(chunk["rewards"])
            assert chunk["obs"].shape == chunk["next_obs"].shape == (steps, 4)
            assert torch.equal(chunk["obs"][1:], chunk["next_obs"][:-1])
            assert not chunk["terminateds"][:-1].any() and not chunk["truncateds"][:-1].any()
            train_step(net, chunk)
        assert synced(sync, net, client) == 2
        assert plays_as(client, net, 80, 1)
        remote = actor.get_remote_model()
        assert remote.version == 2 and set(remote.params) == set(net.state_dict())
        assert np.array_equal(remote.params["2.bias"], net.state_dict()["2.bias"].numpy())
        # The architecture stays the first sync's.
        with pytest.raises(ValueError, match="another form"):
            sync.sync(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)))
        assert dataset.server.weights_version == 2
    finally:
        actor.close()
        client.close(flush=False)
        dataset.close()


def test_a_first_state_dict_the_simulators_cannot_run_is_refused():
    dataset = RLinkDataset(spaces=(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2)))
    try:
        with pytest.raises(ValueError, match="sync the torch module"):
            RLinkSyncModel(dataset).sync({"w": torch.zeros(2, 4)})
        assert dataset.server.weights_version == 0
    finally:
        dataset.close()


def test_samples_and_episodes_side_by_side():
    dataset = RLinkDataset(env="CartPole-v1", model_config=SMALL, fragment_steps=20, batch_size=3, idle_timeout=2)
    RLinkSyncModel(dataset).sync(dataset.default_module("PPO"))
    client = EnvClient(dataset.address, timeout=20)
    actor = RLinkActor(dataset.address, timeout=20)
    try:
        for i in range(6):
            actor.put({"image": np.full((8, 8), i, np.uint8), "index": i})
        items: list[dict] = []
        reader = threading.Thread(target=lambda: items.extend(dataset))  # ends 2 s after the last item
        reader.start()
        play(client, 40, 0)
        client.close()
        reader.join(30)
        assert not reader.is_alive()
        samples = [item for item in items if "kind" not in item]
        chunks = [item for item in items if item.get("kind") == EPISODE]
        assert len(samples) + len(chunks) == len(items)
        assert sorted(int(i) for batch in samples for i in batch["index"]) == list(range(6))
        assert all(batch["image"].shape[1:] == (8, 8) for batch in samples)
        assert sum(len(c["rewards"]) for c in chunks) == 40
    finally:
        actor.close()
        client.close(flush=False)
        dataset.close()


def _raw_client(port: int) -> tuple[socket.socket, Connection]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    conn = Connection(Role.CLIENT, extensions=[Extension.ACK])
    conn.start()
    sock.sendall(b"".join(bytes(p) for p in conn.data_to_send()))
    events: list = []
    while not any(isinstance(e, HandshakeDone) for e in events):
        conn.receive_data(sock.recv(1 << 16))
        events += iter(conn.next_event, None)
    return sock, conn


def _error_after(sock: socket.socket, conn: Connection, episodes: list) -> ErrorReceived:
    conn.send_episodes(episodes, steps=1, timesteps=1, on_policy=False)
    sock.sendall(b"".join(bytes(p) for p in conn.data_to_send()))
    while True:
        data = sock.recv(1 << 16)
        assert data, "closed without an ERROR"
        conn.receive_data(data)
        for event in iter(conn.next_event, None):
            if isinstance(event, ErrorReceived):
                return event


def _chunk(obs_dim: int = 4) -> dict:
    return build_episode_state("e1", np.zeros((2, obs_dim), np.float32), np.array([1]), np.array([1.0]))


def test_episodes_to_a_dataset_without_spaces_are_refused_others_unaffected(caplog):
    caplog.set_level(logging.WARNING, logger="rlinks_rllib.server.samples")
    dataset = RLinkDataset(idle_timeout=5)
    actor = RLinkActor(dataset.address, timeout=10)
    try:
        actor.put({"index": 0})
        sock, conn = _raw_client(dataset.port)
        error = _error_after(sock, conn, [_chunk()])
        sock.close()
        assert error.code == "unsupported_message" and "spaces=" in error.message
        with pytest.raises(ServerError, match="spaces="):
            EnvClient(dataset.address, timeout=10, retry_attempts=1).connect()
        actor.put({"index": 1})
        assert [int(s["index"]) for s in (dataset[0], dataset[1])] == [0, 1]
        assert any("refused" in r.getMessage() and "unsupported_message" in r.getMessage() for r in caplog.records)
    finally:
        dataset.close()  # confirms the last sample handed over: the actor's close has nothing left to wait for
        actor.close()


def test_a_malformed_episode_is_refused_whole_others_unaffected(caplog):
    caplog.set_level(logging.WARNING, logger="rlinks_rllib.server.samples")
    dataset = RLinkDataset(env="CartPole-v1", model_config=SMALL, fragment_steps=20, idle_timeout=5)
    RLinkSyncModel(dataset).sync(dataset.default_module("PPO"))
    good = EnvClient(dataset.address, timeout=20)
    try:
        play(good, 20, 0)
        sock, conn = _raw_client(dataset.port)
        error = _error_after(sock, conn, [_chunk(), _chunk(obs_dim=3)])  # the second does not fit the space
        sock.close()
        assert error.code == "bad_episode" and "episodes[1]" in error.message
        play(good, 20, 1)
        reader, chunks = reading(dataset, 40)
        good.close()
        reader.join(30)
        assert sum(len(c["rewards"]) for c in chunks) == 40 and all(c["eps_id"] != "e1" for c in chunks)
        assert any("refused" in r.getMessage() and "bad_episode" in r.getMessage() for r in caplog.records)
    finally:
        good.close(flush=False)
        dataset.close()


def test_an_on_policy_client_gets_the_newest_weights_at_once():
    dataset = RLinkDataset(env="CartPole-v1", model_config=SMALL, fragment_steps=20, idle_timeout=5)
    RLinkSyncModel(dataset).sync(dataset.default_module("PPO"))
    client = EnvClient(dataset.address, timeout=20, on_policy=True)
    try:
        reader, chunks = reading(dataset, 40)
        play(client, 41, 0)  # the 41st act sends the second share and waits for its SET_STATE
        reader.join(30)
        assert sum(len(c["rewards"]) for c in chunks) == 40 and client.stats.weights_seq_no == 1
    finally:
        client.close(flush=False)
        dataset.close()


def test_a_simulator_that_connects_first_waits_for_the_first_sync():
    dataset = RLinkDataset(env="CartPole-v1", model_config=SMALL, idle_timeout=5)
    client = EnvClient(dataset.address, timeout=20)
    connecting = threading.Thread(target=client.connect)
    try:
        connecting.start()
        for _ in range(400):  # connected: its connect() can't finish before a model is synced
            if dataset.server.stats.connections:
                break
            connecting.join(0.05)
        assert connecting.is_alive() and not dataset.server.model.ready
        RLinkSyncModel(dataset).sync(dataset.default_module("PPO"))
        connecting.join(20)
        assert not connecting.is_alive() and client.stats.weights_seq_no == 1 and client.mode == "local"
    finally:
        client.close(flush=False)
        dataset.close()
