"""The learner's config file: a misspelt key is refused with its line and the right one; docs/CONFIG.md keeps up."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from harness import ROOT
from rlinks_rllib.server.settings import RLinkSettings
from rlinks_rllib.training.config_file import (
    MULTI_AGENT_KEYS,
    SECTIONS,
    SPACES_KEYS,
    STOP_KEYS,
    ConfigFileError,
    build_algorithm_config,
    load_spec,
)

CONFIG_MD = (ROOT / "docs" / "CONFIG.md").read_text()
HEAD = "algorithm: {algorithm}\nspaces:\n  from_env: CartPole-v1\n"  # lines 1-3


def refusal(tmp_path: Path, body: str, algorithm: str = "PPO", head: str = HEAD) -> str:
    """The message load_spec (or, for a space, the build) refuses ``head + body`` with."""
    path = tmp_path / "x.yaml"
    path.write_text(head.format(algorithm=algorithm) + body)
    with pytest.raises(ConfigFileError) as caught:
        build_algorithm_config(load_spec(path))
    return str(caught.value).replace(str(path), "x.yaml")


def test_a_misspelt_rlinks_key_is_refused_with_its_line_and_the_right_key(tmp_path):
    message = refusal(tmp_path, "rlinks:\n  host: 0.0.0.0\n  max_client: 3\n")
    assert message == "x.yaml:6: unknown key 'max_client' in 'rlinks'; did you mean 'max_clients'?"


@pytest.mark.parametrize(("algorithm", "body", "expected"), [
    ("PPO", "env_runners:\n  num_env_runners: 1\n  rollout_fragment_lenght: 50\n",
     "x.yaml:6: unknown key 'rollout_fragment_lenght' in 'env_runners'; did you mean 'rollout_fragment_length'?"),
    # A parameter of APPOConfig.training, two base classes up from it (IMPALAConfig.training).
    ("APPO", "training:\n  vtrace: true\n  lr: 0.001\n  entropy_coef: 0.01\n",
     "x.yaml:7: unknown key 'entropy_coef' in 'training'; did you mean 'entropy_coeff'?"),
    ("PPO", "training:\n  vtrace: true\n",  # APPO's, not PPO's
     "x.yaml:5: unknown key 'vtrace' in 'training' (not a parameter of PPOConfig.training())"),
    ("PPO", "model:\n  fcnet_hidden: [64]\n",
     "x.yaml:5: unknown key 'fcnet_hidden' in 'model'; did you mean 'fcnet_hiddens'?"),
])
def test_a_misspelt_rllib_key_is_refused_against_the_algorithms_own_method(tmp_path, algorithm, body, expected):
    assert refusal(tmp_path, body, algorithm) == expected


def test_an_unknown_section_is_refused_with_its_line_and_the_right_section(tmp_path):
    message = refusal(tmp_path, "training:\n  lr: 0.001\nenv_runner:\n  num_env_runners: 1\n")
    assert message == "x.yaml:6: unknown section 'env_runner'; did you mean 'env_runners'?"


@pytest.mark.parametrize(("algorithm", "body", "expected"), [
    ("PPOO", "", "x.yaml:1: unknown algorithm 'PPOO' (Unknown trainable: PPOO); did you mean 'PPO'?"),
    ("PPO", "stop:\n  reward: 450\n  iter: 60\n", "x.yaml:6: unknown key 'iter' in 'stop'; did you mean 'iters'?"),
    ("PPO", "stop:\n  iters: 2.5\n", "x.yaml:5: stop.iters must be a whole number above 0, got 2.5"),
    ("PPO", "training:\n  lr: 0.1\n  gamma: 0.9\n  lr: 0.2\n",
     "x.yaml:7: 'training.lr' is given twice (first on line 5); YAML would keep only the last"),
])
def test_other_mistakes_that_yaml_would_let_through(tmp_path, algorithm, body, expected):
    assert refusal(tmp_path, body, algorithm) == expected


def test_a_misspelt_box_key_is_refused(tmp_path):
    head = "algorithm: {algorithm}\nspaces:\n  observation: {{box: {{low: 0, high: 1, shape: [3], dtpye: uint8}}}}\n"
    message = refusal(tmp_path, "  action: {discrete: 2}\n", head=head)
    assert message == "x.yaml:3: observation: unknown key 'dtpye' in 'box'; did you mean 'dtype'?"


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_loads_and_builds(path):
    build_algorithm_config(load_spec(path))


def test_the_example_in_config_md_loads_and_builds(tmp_path):
    example = re.search(r"## A short example\n\n```yaml\n(.*?)```", CONFIG_MD, re.S)
    assert example, "docs/CONFIG.md lost its example"
    path = tmp_path / "example.yaml"
    path.write_text(example.group(1))
    build_algorithm_config(load_spec(path))


def test_config_md_names_every_rlinks_setting_with_its_type_and_default():
    rows = {m[1]: (m[2], m[3]) for m in re.finditer(r"^\| `(\w+)` \| (\w+) \| `([^`]*)` \|", CONFIG_MD, re.M)}
    for f in dataclasses.fields(RLinkSettings):
        assert f.name in rows, f"docs/CONFIG.md has no row for the rlinks setting {f.name!r}"
        kind, default = rows[f.name]
        assert (kind, ast.literal_eval(default)) == (f.type, f.default), f"docs/CONFIG.md is stale on {f.name!r}"


def test_config_md_names_every_section_and_key_rlinks_reads_itself():
    for key in (*SECTIONS, *SPACES_KEYS, *STOP_KEYS, *MULTI_AGENT_KEYS):
        assert f"| `{key}` |" in CONFIG_MD, f"docs/CONFIG.md has no row for {key!r}"
