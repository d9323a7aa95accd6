"""What a user can set for :class:`~.env_runner.RLinkEnvRunner`, and where.

Settings live in ``AlgorithmConfig.env_config`` as flat keys, next to RLlib's
own ``port`` key, so a script written for RLlib's
``EnvRunnerServerForExternalInference`` switches over by changing the class::

    config.environment(env_config={"port": 5555, "unsafe_pickle_config": True})

:func:`rlinks_env_config` builds that dict with types checked;
:meth:`RLinkSettings.from_env_config` reads it back on the runner.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from dataclasses import dataclass, fields
from typing import Any, Mapping, Optional

from ..protocol.auth import SECRET_ENV, load_secret
from ..protocol.limits import DEFAULT_MAX_FRAME_BYTES, MAX_BODY_BYTES
from .recorder import AT_CAP_MODES

__all__ = ["RLinkSettings", "rlinks_env_config", "LOOPBACK", "SWITCH_MODES", "is_loopback"]

LOOPBACK = "127.0.0.1"

#: Values of the ``off_policy_backlog`` setting (what :mod:`.delivery.offpolicy` does with a backlog).
BACKLOG_MODES = ("drop", "pace")
#: Values of the ``auth`` and ``policy_graph`` settings.
SWITCH_MODES = ("auto", "on", "off")


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (127.0.0.0/8, ::1, ``localhost``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


@dataclass(frozen=True)
class RLinkSettings:
    """Every knob of the server side, with its default.

    Attributes:
        host: address to listen on; ``0.0.0.0`` to accept simulators from other machines.
        port: base port; the runner with ``worker_index`` i listens on ``port + i``
            (0 means: let the OS pick a free port for each runner).
        unsafe_pickle_config: answer ``GET_CONFIG`` with RLlib's pickled
            ``AlgorithmConfig`` as RLlib's own dummy client needs. UNSAFE: the
            pickle runs code in the client that loads it, so only switch it on
            for clients you trust to trust you.
        max_clients: connections one runner holds at once, counted from accept (TLS
            handshakes in progress included); more are refused with ``ERROR
            limit_exceeded`` (with TLS: closed, since no ERROR can be sent yet).
        handshake_timeout_s: time a new connection has to finish its handshake: TLS,
            PING and, with authentication, AUTH.
        idle_timeout_s: a client that sends nothing for this long (while we owe it
            nothing) is disconnected.
        frame_timeout_s: time a frame may take to arrive once its first byte has.
        max_frame_bytes: largest frame accepted.
        max_episodes_per_message: episode chunks one EPISODES message may carry.
        max_steps_per_chunk: env steps one episode chunk may carry.
        inbox_max_steps: env steps held for ``sample()`` before the runner stops
            reading from clients (TCP then pushes back on them).
        inbox_max_bytes: the same bound in bytes of frames.
        sample_wait_fraction: share of RLlib's ``sample_timeout_s`` that
            ``sample()`` may wait for steps before returning what it has
            (while no client is connected: ``scheduler.IDLE_POLL_S``).
        extend_after_s: when RLlib samples again before sending new weights
            (another runner is still short), wait this long before asking this
            runner's on-policy clients for more steps with the same weights.
        drop_stale_steps: drop (and count) steps sampled with weights older than
            the current ones instead of training on them with their lag reported.
        off_policy_backlog: what an off-policy runner (DQN, SAC) does with steps
            its learner can't take yet beyond ``off_policy_backlog_steps``:
            ``"drop"`` (default) the oldest, counted (``dropped_backlog_steps``),
            so the simulators never wait and the learner gets the freshest;
            ``"pace"``: hold no more, so the simulators' sends wait for the
            learner and nothing is dropped. See ``server/delivery/offpolicy.py``.
        off_policy_backlog_steps: that bound in env steps; 0 (default): four
            rollout fragments, at least 64 steps.
        takeover_terminates: off-policy (SAC, DQN), a take-over is a failure
            signal (RLIF): each episode is cut where the teacher takes over
            (``takeover`` extension), the policy's part handed on terminated
            at the state the teacher took over in, the rest as a new episode
            (``f"{id}/{n}"``). The metrics still count the episodes as played.
            On-policy it does nothing (take-overs are cut out there anyway;
            a warning says so). See ``server/takeover/segments.py``.
        max_write_buffer_bytes: bytes queued to one client before it is cut off as too slow.
        auth: ``"auto"`` (default): require the shared secret when one is set
            (``$RLINKS_SECRET`` in the runner's environment, or
            ``auth_secret_file``); ``"on"``: require it, and fail to start
            without one; ``"off"``: never ask. See ``protocol/auth.py``.
        auth_secret_file: a file holding the shared secret (readable by its owner
            only). There is deliberately no setting that holds the secret itself:
            ``env_config`` is logged, pickled and checkpointed.
        tls_cert_file: PEM certificate chain of the server; setting it switches TLS on.
        tls_key_file: PEM private key of that certificate ('' if it is in ``tls_cert_file``).
        tls_client_ca_file: PEM CA bundle; when set, every client must present a
            certificate signed by it (mutual TLS).
        served_actions: agree to the ``served_actions`` extension (PROTOCOL.md
            10.5) when a client offers it: the runner computes actions for the
            observations in its ``ACT`` messages and records the episodes
            itself. Only for a Box observation space and a Discrete or Box
            action space with a stateless module; otherwise it is never agreed.
        served_batch_size: rows (observations of all clients' ``ACT`` messages) one
            forward pass takes at most; an ``ACT`` with more rows goes alone.
        served_max_wait_us: microseconds the first waiting row of a batch waits
            for more before the forward pass runs anyway (asyncio's timers
            round this up to the millisecond); it does not wait at all once
            every client with open episodes waits for an answer.
        served_report_timeout_s: an env whose served action is not followed by
            a row for it within this time has its episode closed as truncated;
            a client that sends no ``ACT`` at all for this long while it has
            open episodes is cut off with ``ERROR limit_exceeded``.
        served_max_envs: envs with an open served episode one runner holds, over
            all its clients; an ``ACT`` that would open more is refused with
            ``limit_exceeded`` (and one with more than twice as many rows).
        policy_graph: export the module as an ONNX policy graph once, when the
            runner starts, and send it to clients that ask (``policy_graph``,
            PROTOCOL.md 10.7). ``auto``: only for a module a client can't run
            in numpy (an observation that is not a vector, an LSTM, a custom
            module), and an export that fails is logged, not fatal; ``on``:
            always, and a failed export stops the runner; ``off``: never.
        ws_allowed_origins: the origins (``"https://game.example"``) whose pages
            may connect over WebSocket (PROTOCOL.md 16); an upgrade whose
            ``Origin`` header names another is closed with 1008 and why. One
            without ``Origin`` (Node, Python, any program that is not a page)
            is let in. ``"*"``: pages from any origin.
        record_dir: a folder to record every episode this runner hands RLlib
            to, as RLlib's offline data (Parquet; see :mod:`.recorder` and
            docs/RECORDING.md); ``""``: no recording. Each runner writes files
            of its own, so runners on many hosts may share one folder.
        record_max_file_mb: a recording file is closed (and a new one begun)
            before it would pass this many megabytes (10**6 bytes).
        record_max_file_s: a recording file open this long is closed even if
            not full: what a crash of the runner can lose.
        record_max_total_mb: all recording files of one runner stay below this;
            what happens then is ``record_at_cap``.
        record_at_cap: ``"stop"``: stop recording at ``record_max_total_mb``
            (steps not written are counted as ``record_dropped_steps``);
            ``"rotate"``: delete this runner's oldest files (counted as
            ``record_deleted_files``). Either is logged once as a warning.
        record_untrained: also record the episodes this runner receives but
            does not hand RLlib (stale steps dropped by ``drop_stale_steps``, an
            off-policy backlog dropped by ``off_policy_backlog``),
            in ``record_dir/_untrained``.
    """

    host: str = LOOPBACK
    port: int = 5555
    unsafe_pickle_config: bool = False
    max_clients: int = 256
    handshake_timeout_s: float = 10.0
    idle_timeout_s: float = 600.0
    frame_timeout_s: float = 120.0
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_episodes_per_message: int = 4096
    max_steps_per_chunk: int = 100_000
    inbox_max_steps: int = 1_000_000
    inbox_max_bytes: int = 1024 * 1024 * 1024
    sample_wait_fraction: float = 0.75
    extend_after_s: float = 5.0
    drop_stale_steps: bool = False
    off_policy_backlog: str = "drop"
    off_policy_backlog_steps: int = 0
    takeover_terminates: bool = False
    max_write_buffer_bytes: int = 256 * 1024 * 1024
    auth: str = "auto"
    auth_secret_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_client_ca_file: str = ""
    served_actions: bool = True
    served_batch_size: int = 256
    served_max_wait_us: int = 500
    served_report_timeout_s: float = 60.0
    served_max_envs: int = 4096
    policy_graph: str = "auto"
    ws_allowed_origins: tuple = ()
    record_dir: str = ""
    record_max_file_mb: float = 64.0
    record_max_file_s: float = 300.0
    record_max_total_mb: float = 10_240.0
    record_at_cap: str = "stop"
    record_untrained: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            expected = {"str": str, "int": int, "float": (int, float), "bool": bool, "tuple": (list, tuple)}[f.type]
            if type(value) is bool and f.type != "bool" or not isinstance(value, expected):
                raise ValueError(f"rlinks setting {f.name!r} must be {f.type}, got {value!r}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"rlinks setting 'port' must be in 0..65535, got {self.port}")
        if not 0 < self.max_frame_bytes <= MAX_BODY_BYTES:
            raise ValueError(f"rlinks setting 'max_frame_bytes' must be in 1..{MAX_BODY_BYTES}")
        if not 0 < self.sample_wait_fraction < 1:
            raise ValueError("rlinks setting 'sample_wait_fraction' must be between 0 and 1")
        for name in ("max_clients", "max_episodes_per_message", "max_steps_per_chunk",
                     "inbox_max_steps", "inbox_max_bytes", "max_write_buffer_bytes", "served_batch_size",
                     "served_max_envs"):
            if getattr(self, name) < 1:
                raise ValueError(f"rlinks setting {name!r} must be positive")
        for name in ("handshake_timeout_s", "idle_timeout_s", "frame_timeout_s", "served_report_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"rlinks setting {name!r} must be positive")
        if self.served_max_wait_us < 0:
            raise ValueError("rlinks setting 'served_max_wait_us' must not be negative")
        for name in ("auth", "policy_graph"):
            if getattr(self, name) not in SWITCH_MODES:
                raise ValueError(f"rlinks setting {name!r} must be one of {SWITCH_MODES}, got {getattr(self, name)!r}")
        if not all(isinstance(origin, str) and origin for origin in self.ws_allowed_origins):
            raise ValueError(f"rlinks setting 'ws_allowed_origins' must be a list of origins, got "
                             f"{self.ws_allowed_origins!r}")
        object.__setattr__(self, "ws_allowed_origins", tuple(self.ws_allowed_origins))  # YAML gives a list
        if (self.tls_key_file or self.tls_client_ca_file) and not self.tls_cert_file:
            raise ValueError("rlinks settings 'tls_key_file' and 'tls_client_ca_file' need 'tls_cert_file'")
        if self.off_policy_backlog not in BACKLOG_MODES:
            raise ValueError(f"rlinks setting 'off_policy_backlog' must be one of {BACKLOG_MODES}, "
                             f"got {self.off_policy_backlog!r}")
        if self.off_policy_backlog_steps < 0:
            raise ValueError("rlinks setting 'off_policy_backlog_steps' must not be negative (0: the default)")
        self._check_recording()

    def _check_recording(self) -> None:
        for name in ("record_max_file_mb", "record_max_file_s", "record_max_total_mb"):
            if getattr(self, name) <= 0:
                raise ValueError(f"rlinks setting {name!r} must be positive")
        if self.record_at_cap not in AT_CAP_MODES:
            raise ValueError(f"rlinks setting 'record_at_cap' must be one of {AT_CAP_MODES}, "
                             f"got {self.record_at_cap!r}")
        if self.record_at_cap == "rotate" and self.record_max_total_mb < 2 * self.record_max_file_mb:
            raise ValueError("rlinks setting 'record_max_total_mb' must be at least twice 'record_max_file_mb' "
                             "with record_at_cap='rotate' (an old file is deleted only once a newer one is whole)")

    @property
    def tls(self) -> bool:
        """Whether the runner speaks TLS."""
        return bool(self.tls_cert_file)

    @property
    def loopback_only(self) -> bool:
        """Whether only this machine can reach the listening address."""
        return is_loopback(self.host)

    def auth_secret(self, environ: Optional[Mapping[str, str]] = None) -> Optional[bytes]:
        """The shared secret clients must prove they know; ``None``: no authentication.

        Read when called (on the runner, where the environment and the file are).

        Raises:
            ValueError: ``auth="on"`` and no secret is set, or the secret is malformed.
            OSError: ``auth_secret_file`` can't be read.
        """
        if self.auth == "off":
            return None
        secret = load_secret(self.auth_secret_file or None, environ)
        if secret is None and self.auth == "on":
            raise ValueError(
                f"rlinks setting auth='on' but no secret: set ${SECRET_ENV} in the runner's environment "
                "or the setting 'auth_secret_file'"
            )
        return secret

    @classmethod
    def from_env_config(cls, env_config: Mapping[str, Any] | None) -> "RLinkSettings":
        """Read the settings among the keys of an ``env_config``; other keys are left alone.

        Raises:
            ValueError: a setting has the wrong type or range.
        """
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in dict(env_config or {}).items() if k in names})

    def port_for(self, worker_index: int) -> int:
        """The port the runner with ``worker_index`` listens on (0: any free port)."""
        return 0 if self.port == 0 else self.port + worker_index


def rlinks_env_config(**settings: Any) -> dict:
    """An ``env_config`` dict with rlinks settings, checked now rather than on the runner.

    Example::

        config.environment(observation_space=obs, action_space=act,
                           env_config=rlinks_env_config(port=5555, host="0.0.0.0"))

    Raises:
        ValueError: an unknown setting, or a setting of the wrong type or range.
    """
    names = {f.name for f in fields(RLinkSettings)}
    unknown = sorted(set(settings) - names)
    if unknown:
        raise ValueError(f"unknown rlinks settings {unknown}; known: {sorted(names)}")
    return dataclasses.asdict(RLinkSettings(**settings))
