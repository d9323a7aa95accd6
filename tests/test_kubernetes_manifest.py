"""examples/kubernetes/rayjob.yaml stays consistent with the CLI and the config format (it is not run here)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

MANIFEST = Path(__file__).resolve().parents[1] / "examples" / "kubernetes" / "rayjob.yaml"


def _documents() -> dict[str, dict]:
    return {doc["kind"] + "/" + doc["metadata"]["name"]: doc for doc in yaml.safe_load_all(MANIFEST.read_text())}


def test_the_entrypoint_uses_only_flags_rlinks_learner_has():
    entrypoint = shlex.split(_documents()["RayJob/rlinks-learner"]["spec"]["entrypoint"])
    assert entrypoint[:2] == ["rlinks", "learner"]
    helped = subprocess.run([sys.executable, "-m", "rlinks_rllib", "learner", "--help"], capture_output=True,
                            text=True, timeout=60, check=True).stdout
    known = set(re.findall(r"--[a-z][a-z-]+", helped))
    used = [arg for arg in entrypoint[2:] if arg.startswith("--")]
    assert used and set(used) <= known, set(used) - known


def test_the_config_loads_and_the_services_expose_its_ports(tmp_path):
    from rlinks_rllib.training.config_file import load_spec

    docs = _documents()
    config = tmp_path / "learner.yaml"
    config.write_text(docs["ConfigMap/rlinks-learner-config"]["data"]["learner.yaml"])
    spec = load_spec(config)
    base, runners = spec.rlinks["port"], spec.env_runners["num_env_runners"]
    assert spec.rlinks["host"] == "0.0.0.0" and spec.rlinks["auth"] == "on"
    entrypoint = shlex.split(docs["RayJob/rlinks-learner"]["spec"]["entrypoint"])
    assert entrypoint[entrypoint.index("--port") + 1] == str(base)
    assert [p["port"] for p in docs["Service/rlinks-directory"]["spec"]["ports"]] == [base]
    assert [p["port"] for p in docs["Service/rlinks-runners"]["spec"]["ports"]] == [base + i for i in
                                                                                     range(1, runners + 1)]
    mounted = {m["mountPath"] for m in docs["RayJob/rlinks-learner"]["spec"]["rayClusterSpec"]["headGroupSpec"]
               ["template"]["spec"]["containers"][0]["volumeMounts"]}
    for key in ("auth_secret_file", "tls_cert_file", "tls_key_file"):
        assert str(Path(spec.rlinks[key]).parent) in mounted
