"""A learner's YAML config file, and the RLlib ``AlgorithmConfig`` it describes.

The file names the algorithm, the spaces the simulators use, and the settings
of each part, one section each::

    algorithm: PPO
    spaces: {from_env: CartPole-v1}     # or observation/action, see below
    training: {lr: 0.0005, train_batch_size_per_learner: 2000}
    model: {fcnet_hiddens: [64, 64]}
    env_runners: {num_env_runners: 2}
    learners: {num_learners: 0}
    reporting: {min_time_s_per_iteration: 1}        # also fault_tolerance
    rlinks: {host: 127.0.0.1, port: 5555}
    stop: {reward: 450, iters: 60}

A multi-agent config replaces ``spaces`` by a ``multi_agent`` section: its
modules with their spaces, the agent mapping table, which modules train
(see :func:`_multi_agent`, and ``configs/ppo_multi_agent.yaml``).

Every mistake is reported with the file, line and key that caused it, as
:class:`ConfigFileError`, so ``rlinks learner`` can print one clear line. An
unknown key is refused when the file is loaded, with the closest known one
("did you mean"): a top-level section, a key of ``rlinks`` (the fields of
:class:`~rlinks_rllib.server.settings.RLinkSettings`), of ``spaces``,
``stop``, ``multi_agent`` and ``model``, and a key of a section that goes to an
``AlgorithmConfig`` method (:data:`RLLIB_SECTIONS`), checked against that
method's parameters. ``docs/CONFIG.md`` is the reference of every key.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..protocol.errors import RLinksError
from ..protocol.spaces import MAX_SPACE_DEPTH, describe_space, format_path

__all__ = ["ConfigFileError", "LearnerSpec", "load_spec", "build_algorithm_config", "parse_space"]

SECTIONS = ("algorithm", "spaces", "training", "model", "env_runners", "learners", "reporting", "fault_tolerance",
            "rlinks", "stop", "description", "multi_agent", "offline_data", "evaluation")
#: Sections passed whole to the ``AlgorithmConfig`` method of the same name.
RLLIB_SECTIONS = ("training", "env_runners", "learners", "reporting", "fault_tolerance", "offline_data", "evaluation")
#: The ``offline_data`` key naming the recording an offline algorithm (BC, MARWIL, CQL) reads.
OFFLINE_INPUT_KEY = "input_"
#: Keys of the sections rlinks reads itself (``rlinks``: the fields of ``RLinkSettings``).
SPACES_KEYS = ("from_env", "observation", "action")
STOP_KEYS = ("reward", "iters")
MULTI_AGENT_KEYS = ("modules", "agent_mapping", "trained", "count_steps_by")
BOX_KEYS = ("low", "high", "shape", "dtype")
#: ``training`` keys RLlib takes as a range only when they are a tuple (``n_step: [2, 5]``: an
#: n-step drawn from 2..5); YAML gives a list, which RLlib's checks and replay buffers mistake.
TUPLE_KEYS = ("n_step",)


class ConfigFileError(RLinksError, ValueError):
    """A config file that can't be read or describes something invalid."""


@dataclass
class LearnerSpec:
    """What a config file says, with each key's line kept for error messages."""

    path: str
    algorithm: str
    spaces: dict
    training: dict = field(default_factory=dict)
    model: dict = field(default_factory=dict)
    env_runners: dict = field(default_factory=dict)
    learners: dict = field(default_factory=dict)
    reporting: dict = field(default_factory=dict)
    fault_tolerance: dict = field(default_factory=dict)
    rlinks: dict = field(default_factory=dict)
    stop: dict = field(default_factory=dict)
    multi_agent: dict = field(default_factory=dict)
    offline_data: dict = field(default_factory=dict)
    evaluation: dict = field(default_factory=dict)
    description: str = ""
    lines: dict = field(default_factory=dict)

    def where(self, *keys: str) -> str:
        """``path:line`` of a (nested) key, as precisely as known."""
        for depth in range(len(keys), 0, -1):
            line = self.lines.get(keys[:depth])
            if line is not None:
                return f"{self.path}:{line}"
        return self.path


def _unknown_key(where: str, key: Any, known: Any, what: str,
                 listed: str = "docs/CONFIG.md lists them") -> ConfigFileError:
    """The error for a key not among ``known``: *where* and *what* it is, and the closest known key.

    *what* says what was unknown (``unknown key 'x' in 'rlinks'``); the
    message adds ``did you mean`` when a known key is close, else the known
    keys when they are few, else *listed* (where to find them).
    """
    known = sorted(str(k) for k in known)
    close = difflib.get_close_matches(str(key), known, n=1)
    if close:
        hint = f"; did you mean {close[0]!r}?"
    elif len(known) <= 12:
        hint = f"; expected one of {', '.join(known)}"
    else:
        hint = f" ({listed})"
    return ConfigFileError(f"{where}: {what}{hint}")


def _key_lines(node: yaml.Node, path: str, prefix: tuple = ()) -> dict:
    """The line of every key of a section and of the sections; a key given twice is refused.

    Raises:
        ConfigFileError: a key appears twice in one mapping (YAML would keep the last silently).
    """
    lines: dict[tuple, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = prefix + (str(key_node.value),)
            line = key_node.start_mark.line + 1
            if key in lines:
                raise ConfigFileError(f"{path}:{line}: {'.'.join(key)!r} is given twice (first on line "
                                      f"{lines[key]}); YAML would keep only the last")
            lines[key] = line
            if len(key) < 2:
                lines.update(_key_lines(value_node, path, key))
    return lines


def load_spec(path: str | Path) -> LearnerSpec:
    """Read and check a config file.

    Raises:
        ConfigFileError: the file is missing, isn't valid YAML, gives a key
            twice, has an unknown section, key or algorithm, or values of
            the wrong kind; the message names the line (and, for an unknown
            name, the closest known one).
    """
    path = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigFileError(f"{path}: cannot read config file: {exc.strerror}") from exc
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        raise ConfigFileError(f"{where}: not valid YAML: {exc.problem}") from exc
    except yaml.YAMLError as exc:
        raise ConfigFileError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigFileError(f"{path}: the file must be a mapping of sections ({', '.join(SECTIONS)})")
    lines = _key_lines(node, path) if node is not None else {}
    for key, value in data.items():
        where = f"{path}:{lines.get((str(key),), '?')}"
        if key not in SECTIONS:
            raise _unknown_key(where, key, SECTIONS, f"unknown section {key!r}")
        if key in ("algorithm", "description"):
            if not isinstance(value, str):
                raise ConfigFileError(f"{where}: {key!r} must be a string")
        elif not isinstance(value, dict):
            raise ConfigFileError(f"{where}: section {key!r} must be a mapping of settings")
    if "algorithm" not in data:
        raise ConfigFileError(f"{path}: missing 'algorithm' (e.g. PPO, APPO, IMPALA)")
    if "spaces" not in data and "multi_agent" not in data:
        raise ConfigFileError(f"{path}: missing 'spaces' (from_env: CartPole-v1, or observation/action)")
    data.setdefault("spaces", {})
    spec = LearnerSpec(path=path, lines=lines, **{k: v for k, v in data.items()})
    _check_keys(spec)
    return spec


def _check_keys(spec: LearnerSpec) -> None:
    """Refuse the first unknown key, in the order of the file, naming its line and the closest known key.

    Raises:
        ConfigFileError: an unknown key, an unknown algorithm (RLlib's
            sections are checked against that algorithm's config class), or
            a ``stop`` value that is not a number.
    """
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    from ..server.settings import RLinkSettings

    known = {
        "rlinks": [f.name for f in dataclasses.fields(RLinkSettings)],
        "spaces": SPACES_KEYS,
        "stop": STOP_KEYS,
        "multi_agent": MULTI_AGENT_KEYS,
        "model": [f.name for f in dataclasses.fields(DefaultModelConfig)],
    }
    config = _default_config(spec)
    for section in sorted(known.keys() | set(RLLIB_SECTIONS), key=lambda s: spec.lines.get((s,), 0)):
        keys, listed = known.get(section), "docs/CONFIG.md lists them"
        if keys is None:
            keys, listed = _rllib_parameters(config, section), f"not a parameter of {type(config).__name__}.{section}()"
            if keys is None:
                continue  # the method takes **kwargs it does not pass to RLlib's base class: can't tell
        for key in getattr(spec, section):
            if key not in keys:
                raise _unknown_key(spec.where(section, str(key)), key, keys,
                                   f"unknown key {key!r} in {section!r}", listed)
    iters, reward = spec.stop.get("iters", 1), spec.stop.get("reward")
    if type(iters) is not int or iters < 1:
        raise ConfigFileError(f"{spec.where('stop', 'iters')}: stop.iters must be a whole number above 0, "
                              f"got {iters!r}")
    if reward is not None and type(reward) not in (int, float):
        raise ConfigFileError(f"{spec.where('stop', 'reward')}: stop.reward must be a number, got {reward!r}")


def _rllib_parameters(config: Any, method: str) -> set[str] | None:
    """The keyword parameters ``config.<method>(...)`` takes; ``None``: any (it ends in ``**kwargs``).

    An algorithm's config class adds its own parameters and hands
    ``**kwargs`` on to its base class's method (``PPOConfig.training`` to
    ``AlgorithmConfig.training``), so the parameters of every class up the
    MRO count until a method that takes no ``**kwargs``.
    """
    names: set[str] = set()
    for cls in type(config).__mro__:
        function = cls.__dict__.get(method)
        if function is None:
            continue
        parameters = list(inspect.signature(function).parameters.values())[1:]  # self
        names.update(p.name for p in parameters if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            return names
    return None


def _default_config(spec: LearnerSpec) -> Any:
    """The algorithm's default ``AlgorithmConfig``.

    Raises:
        ConfigFileError: no algorithm of that name is registered with Ray Tune.
    """
    from ray.rllib.algorithms.registry import ALGORITHMS
    from ray.tune.registry import get_trainable_cls

    try:
        return get_trainable_cls(spec.algorithm).get_default_config()
    except Exception as exc:  # noqa: BLE001 - Tune raises several kinds; all mean "no such algorithm"
        raise _unknown_key(spec.where("algorithm"), spec.algorithm, ALGORITHMS,
                          f"unknown algorithm {spec.algorithm!r} ({exc})") from exc


def parse_space(desc: Any, where: str, name: str = "space", path: tuple = ()) -> Any:
    """A gymnasium space from its YAML form.

    Leaves: ``{discrete: 2}``, ``{box: {low: -1.0, high: 1.0, shape: [3],
    dtype: float32}}`` (``low``/``high`` numbers or lists; ``dtype`` any
    numeric numpy name, ``uint8`` for images), ``{multi_discrete: [3, 2]}``,
    ``{multi_binary: 4}`` or ``{multi_binary: [2, 3]}``. Containers, nested:
    ``{dict: {camera: <space>, joints: <space>}}`` and
    ``{tuple: [<space>, <space>]}``. The same limits hold as for a space that
    comes over the wire (:mod:`rlinks_rllib.protocol.spaces`).

    Raises:
        ConfigFileError: the description is malformed; the message gives
            *where* (the file and line) and the key path inside the space
            named *name*.
    """
    import gymnasium as gym
    import numpy as np

    at = f"{where}: {name}{format_path(path)}"
    if len(path) >= MAX_SPACE_DEPTH:
        raise ConfigFileError(f"{at}: spaces nest deeper than {MAX_SPACE_DEPTH}")
    if not isinstance(desc, dict) or len(desc) != 1:
        raise ConfigFileError(
            f"{at}: a space is one of {{discrete: N}}, {{box: {{...}}}}, {{multi_discrete: [...]}}, "
            "{multi_binary: N}, {dict: {key: <space>, ...}}, {tuple: [<space>, ...]}"
        )
    (kind, value), = desc.items()
    try:
        if kind == "dict":
            if not isinstance(value, dict) or not value:
                raise ConfigFileError(f"{at}: a dict space maps keys to spaces")
            return gym.spaces.Dict(
                {str(key): parse_space(sub, where, name, path + (str(key),)) for key, sub in value.items()}
            )
        if kind == "tuple":
            if not isinstance(value, list) or not value:
                raise ConfigFileError(f"{at}: a tuple space is a list of spaces")
            return gym.spaces.Tuple([parse_space(sub, where, name, path + (i,)) for i, sub in enumerate(value)])
        if kind == "discrete":
            return gym.spaces.Discrete(int(value))
        if kind == "multi_discrete":
            return gym.spaces.MultiDiscrete(list(value))
        if kind == "multi_binary":
            return gym.spaces.MultiBinary(list(value) if isinstance(value, list) else int(value))
        if kind == "box":
            for key in value if isinstance(value, dict) else ():
                if key not in BOX_KEYS:
                    raise _unknown_key(at, key, BOX_KEYS, f"unknown key {key!r} in 'box'")
            dtype = np.dtype(value.get("dtype", "float32"))
            if dtype.kind not in "biuf":
                raise ValueError(f"dtype {dtype} is not a plain bool, int or float")
            shape = tuple(value["shape"]) if "shape" in value else None
            low = np.array(value["low"], dtype=dtype) if isinstance(value["low"], list) else value["low"]
            high = np.array(value["high"], dtype=dtype) if isinstance(value["high"], list) else value["high"]
            return gym.spaces.Box(low=low, high=high, shape=shape, dtype=dtype)
    except ConfigFileError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigFileError(f"{at}: bad {kind} space: {exc}") from exc
    raise ConfigFileError(f"{at}: unknown space kind {kind!r}")


def resolve_spaces(spec: LearnerSpec) -> tuple[Any, Any]:
    """The observation and action spaces a spec names.

    Raises:
        ConfigFileError: neither ``from_env`` nor both spaces are given, or they are malformed.
    """
    spaces = spec.spaces
    if "from_env" in spaces:
        import gymnasium as gym

        try:
            env = gym.make(spaces["from_env"])
        except gym.error.Error as exc:
            raise ConfigFileError(f"{spec.where('spaces', 'from_env')}: {exc}") from exc
        env.close()
        return env.observation_space, env.action_space
    if "observation" not in spaces or "action" not in spaces:
        raise ConfigFileError(f"{spec.where('spaces')}: give 'from_env' or both 'observation' and 'action'")
    parsed = []
    for name in ("observation", "action"):
        where = spec.where("spaces", name)
        space = parse_space(spaces[name], where, name)
        try:
            describe_space(space)
        except TypeError as exc:
            raise ConfigFileError(f"{where}: {name}: {exc}") from exc
        parsed.append(space)
    return parsed[0], parsed[1]


def _apply(spec: LearnerSpec, section: str, method: Any, values: dict) -> None:
    """Call ``config.<section>(**values)``, turning RLlib's complaints into file lines.

    The keys were checked when the file was loaded (:func:`_check_keys`);
    what RLlib refuses here is a value.
    """
    for key, value in values.items():
        try:
            method(**{key: value})
        except (TypeError, ValueError) as exc:
            raise ConfigFileError(f"{spec.where(section, key)}: {section}.{key}: {exc}") from exc


def build_algorithm_config(spec: LearnerSpec, *, overrides: dict | None = None) -> Any:
    """The ``AlgorithmConfig`` a spec describes, with :class:`RLinkEnvRunner` registered.

    ``overrides`` holds command-line values by section, applied on top.

    Raises:
        ConfigFileError: an unknown algorithm, a malformed space, or a value
            RLlib refuses (unknown keys were refused by :func:`load_spec`).
    """
    from ..server.env_runner import RLinkEnvRunner
    from ..server.delivery.receipts import RLinkReceipts
    from ..server.settings import rlinks_env_config
    from ..server.delivery.shares import RLinkShares
    from .replay import RLinkReplaySafe

    overrides = overrides or {}
    config = _default_config(spec)
    offline_data = {**spec.offline_data, **overrides.get("offline_data", {})}
    if offline_data.get(OFFLINE_INPUT_KEY):
        return _offline_config(spec, config, offline_data, overrides)
    observation_space, action_space = resolve_spaces(spec) if spec.spaces or not spec.multi_agent else (None, None)
    rlinks = {**spec.rlinks, **overrides.get("rlinks", {})}
    try:
        env_config = rlinks_env_config(**rlinks)
    except ValueError as exc:
        raise ConfigFileError(f"{spec.where('rlinks')}: {exc}") from exc
    config.environment(observation_space=observation_space, action_space=action_space, env_config=env_config)
    config.env_runners(env_runner_cls=RLinkEnvRunner)
    # A remote runner hands RLlib again what it dropped (a sample() result that came too late),
    # and asks its clients for the part of each update they are of all clients; an off-policy
    # replay buffer fits in chunks that a reconnect repeats or a runner move reorders (see replay.py).
    config.callbacks([RLinkReceipts, RLinkShares, RLinkReplaySafe])
    if spec.multi_agent:
        _multi_agent(spec, config)
    _apply(spec, "env_runners", config.env_runners, {**spec.env_runners, **overrides.get("env_runners", {})})
    _apply_algorithm_sections(spec, config, overrides)
    _encode_nested_observations(spec, config, observation_space)
    return config


def _apply_algorithm_sections(spec: LearnerSpec, config: Any, overrides: dict) -> None:
    """The sections that say how the algorithm learns and reports, online or offline alike."""
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    _apply(spec, "training", config.training,
           {k: tuple(v) if k in TUPLE_KEYS and isinstance(v, list) else v for k, v in spec.training.items()})
    _apply(spec, "learners", config.learners, {**spec.learners, **overrides.get("learners", {})})
    _apply(spec, "reporting", config.reporting, spec.reporting)
    _apply(spec, "fault_tolerance", config.fault_tolerance, spec.fault_tolerance)
    _apply(spec, "evaluation", config.evaluation, spec.evaluation)
    if spec.model:
        config.rl_module(model_config=DefaultModelConfig(**spec.model))


def _offline_config(spec: LearnerSpec, config: Any, offline_data: dict, overrides: dict) -> Any:
    """The config of an algorithm that trains from recorded data (``offline_data.input_``), not from runners.

    No runner listens: the data is read with Ray Data from ``input_`` (a
    recording folder, or a list of them; relative paths are taken from the
    current folder, since Ray's workers start elsewhere). With
    ``spaces.from_env`` RLlib's own evaluation runners step that gymnasium
    env, so ``evaluation`` measures the return of what was learned.

    Raises:
        ConfigFileError: ``input_`` is not a folder or a list of them, or RLlib refuses a value.
    """
    where = spec.where("offline_data", OFFLINE_INPUT_KEY)
    paths = offline_data[OFFLINE_INPUT_KEY]
    paths = [paths] if isinstance(paths, str) else paths
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise ConfigFileError(f"{where}: offline_data.input_ must be a folder or a list of folders")
    offline_data[OFFLINE_INPUT_KEY] = [p if "://" in p else str(Path(p).resolve()) for p in paths]
    if "from_env" in spec.spaces:
        config.environment(env=spec.spaces["from_env"])
    else:
        observation_space, action_space = resolve_spaces(spec)
        config.environment(observation_space=observation_space, action_space=action_space)
    _apply(spec, "offline_data", config.offline_data, offline_data)
    if config.prelearner_class is None:
        from .prelearner import recording_prelearner

        config.offline_data(prelearner_class=recording_prelearner())  # reads a recording's raw image columns
    _apply_algorithm_sections(spec, config, overrides)
    return config


def _encode_nested_observations(spec: LearnerSpec, config: Any, observation_space: Any) -> None:
    """Give a Dict/Tuple observation the multi-input encoder (RLlib has none for it).

    Raises:
        ConfigFileError: the algorithm's module is not PPO's (PPO, APPO and
            IMPALA share it); others have no encoder for nested spaces here.
    """
    from ray.rllib.algorithms.ppo.default_ppo_rl_module import DefaultPPORLModule
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from .multi_input import MultiInputPPOCatalog, needs_multi_input

    if not needs_multi_input(observation_space):
        return
    module_class = config.get_default_rl_module_spec().module_class
    if not issubclass(module_class, DefaultPPORLModule):
        raise ConfigFileError(
            f"{spec.where('spaces', 'observation')}: a Dict, Tuple or uint8 image observation needs PPO, APPO or IMPALA "
            f"(their module takes the multi-input encoder); {spec.algorithm} has none for it"
        )
    config.rl_module(rl_module_spec=RLModuleSpec(catalog_class=MultiInputPPOCatalog))


def _multi_agent(spec: LearnerSpec, config: Any) -> None:
    """``config.multi_agent(...)`` from the ``multi_agent`` section::

        multi_agent:
          modules:                          # module id -> its spaces
            seeker: {observation: {box: {...}}, action: {discrete: 3}}
            signal: {observation: {box: {...}}, action: {discrete: 3}}
          agent_mapping:                    # agent-id pattern -> module id, first match wins
            - ["seeker_*", seeker]
            - ["signal_*", signal]
          trained: [seeker, signal]         # optional (default: all); the others are served frozen
          count_steps_by: env_steps         # optional: or agent_steps

    The table is RLlib's ``policy_mapping_fn`` and is sent to the clients in ``SET_CONFIG``.

    Raises:
        ConfigFileError: a missing or malformed part, naming its line.
    """
    from ray.rllib.policy.policy import PolicySpec

    from ..protocol.agent_mapping import AgentMapping
    from ..protocol.errors import InvalidMessage

    section = spec.multi_agent
    modules = section.get("modules")
    if not isinstance(modules, dict) or not modules:
        raise ConfigFileError(f"{spec.where('multi_agent', 'modules')}: multi_agent needs 'modules': "
                              "module id -> {observation: SPACE, action: SPACE}")
    policies = {}
    for module_id, entry in modules.items():
        where = spec.where("multi_agent", "modules")
        if not isinstance(entry, dict) or "observation" not in entry or "action" not in entry:
            raise ConfigFileError(f"{where}: module {module_id!r} needs 'observation' and 'action' spaces")
        policies[str(module_id)] = PolicySpec(observation_space=parse_space(entry["observation"], where),
                                              action_space=parse_space(entry["action"], where))
    try:
        mapping = AgentMapping(section.get("agent_mapping") or [])
    except InvalidMessage as exc:
        raise ConfigFileError(f"{spec.where('multi_agent', 'agent_mapping')}: {exc}") from exc
    unknown = sorted(mapping.module_ids - set(policies))
    if unknown:
        raise ConfigFileError(f"{spec.where('multi_agent', 'agent_mapping')}: names modules not in "
                              f"'modules': {unknown}")
    trained = section.get("trained", list(policies))
    if not isinstance(trained, list) or not set(trained) <= set(policies):
        raise ConfigFileError(f"{spec.where('multi_agent', 'trained')}: 'trained' must list module ids of 'modules'")
    options = {"policies": policies, "policy_mapping_fn": mapping, "policies_to_train": [str(m) for m in trained]}
    if "count_steps_by" in section:
        options["count_steps_by"] = section["count_steps_by"]
    try:
        config.multi_agent(**options)
    except ValueError as exc:
        raise ConfigFileError(f"{spec.where('multi_agent')}: multi_agent: {exc}") from exc
