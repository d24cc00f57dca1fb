"""NeMo Gym 0.7.0's own ``opensandbox`` provider block with an OpenSandbox server configured
(docs/runtime.md, "Task sandboxes on an OpenSandbox server"), from real config YAML: the block is
kept and pointed at the daemon's gate (rewritten to ``gym_runtime`` only without a server, or under
``GYM_RUNTIME_SANDBOX_PROVIDER=gym_runtime``); each server that names it gets the gate's address and
a token of its own in its own config view, no other server does, and the operator's key is in no
view and no dump; images are approved exactly or by a prefix ending in ``/``, and with nothing
approved every such server is refused (fail closed): ``validate`` and ``config`` exit 1 with
``GR-CONFIG-TASK-IMAGE`` naming the file, the key, the server, the image and the setting."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gym_runtime.config.redact import MASK
from gym_runtime.errors import ConfigError
from gym_runtime.settings import load_settings
from gym_runtime.supervise import contract
from gym_runtime.task_sandboxes.approval import ApprovedImages
from gym_runtime.task_sandboxes.bringup import choose_providers, gate_patch, gate_users
from gym_runtime.task_sandboxes.offer import GATE_PLACEHOLDER
from tests.config.conftest import build, builtins, pkg_with  # noqa: F401 (fixtures)
from tests.config.test_secrets import AGENT, MODEL, TOOLS

OPERATOR_KEY = "osb-operator-" + "5be1d0c4"
# the shape of NeMo Gym 0.7.0's nemo_gym/sandbox/providers/opensandbox/configs/opensandbox.yaml, a
# resources server naming it (litmus_agent's sandbox_spec), one with an inline block and an image of
# its own (vibench's build_image), and an agent that names no provider
CONFIG = """\
sandbox:
  default_metadata:
    sandbox-api: opensandbox-sdk
  opensandbox:
    connection:
      domain: ${oc.env:OPENSANDBOX_DOMAIN,opensandbox-server.opensandbox-system.svc.cluster.local}
      api_key: ${oc.env:OPENSANDBOX_API_KEY}
      protocol: http
      request_timeout_s: 300
    create:
      timeout_s: 1500
swe:
  resources_servers:
    tools:
      entrypoint: app.py
      domain: coding
      sandbox_provider: sandbox
      sandbox_spec:
        image: ${oc.env:SWE_IMAGE,registry.example/swe/django:1}
        ttl_s: 1800
judge:
  resources_servers:
    tools:
      entrypoint: app.py
      domain: coding
      sandbox_provider:
        opensandbox:
          connection:
            domain: sandboxes.example.invalid
            api_key: ${oc.env:OPENSANDBOX_API_KEY}
      sandbox_config:
        build_image: docker.io/library/python:3.12-slim
agent:
  responses_api_agents:
    agent:
      entrypoint: app.py
      resources_server: {type: resources_servers, name: swe}
      model_server: {type: responses_api_models, name: policy_model}
policy_model:
  responses_api_models:
    m:
      entrypoint: app.py
      base_url: ${policy_base_url}
      api_key: ${policy_api_key}
"""
BOTH = "registry.example/swe/,docker.io/library/python:3.12-slim"


@pytest.fixture
def package(pkg_with) -> Path:  # noqa: F811
    return pkg_with({"configs/env.yaml": CONFIG}, [MODEL, TOOLS, AGENT])


def _operator(monkeypatch, images: str | None, domain: str = "127.0.0.1:1") -> None:
    monkeypatch.setenv("OPENSANDBOX_DOMAIN", domain)
    monkeypatch.setenv("OPENSANDBOX_API_KEY", OPERATOR_KEY)
    if images is None:
        monkeypatch.delenv("GYM_RUNTIME_OPENSANDBOX_TASK_IMAGES", raising=False)
    else:
        monkeypatch.setenv("GYM_RUNTIME_OPENSANDBOX_TASK_IMAGES", images)


def _merged(build, package, say=None):  # noqa: F811
    merged = build(package)
    notes: list[str] = []
    choose_providers(merged, load_settings(), notes.append)
    return merged, notes


def test_with_a_server_the_block_is_kept_and_pointed_at_the_gate(build, package, monkeypatch) -> None:  # noqa: F811
    _operator(monkeypatch, BOTH)
    merged, notes = _merged(build, package)
    for block in (merged.data["sandbox"], merged.data["judge"]["resources_servers"]["tools"]["sandbox_provider"]):
        assert set(block) - {"default_metadata"} == {"opensandbox"}  # Gym's own provider, not gym_runtime
        conn = block["opensandbox"]["connection"]
        assert conn["domain"] == GATE_PLACEHOLDER and conn["api_key"] is None and conn["use_server_proxy"] is True
    assert merged.data["sandbox"]["opensandbox"]["create"] == {"timeout_s": 1500}  # the rest is the config's
    assert merged.data["sandbox"]["default_metadata"] == {"sandbox-api": "opensandbox-sdk"}
    assert sorted(gate_users(merged)) == ["judge", "swe"]
    assert len(notes) == 2 and all("'opensandbox' is kept" in n and "http://127.0.0.1:1" in n for n in notes)
    assert OPERATOR_KEY not in yaml.safe_dump(merged.data)  # gone before any view or dump is made


def test_without_a_server_or_under_gym_runtime_it_is_rewritten(build, package, monkeypatch) -> None:  # noqa: F811
    monkeypatch.setenv("OPENSANDBOX_API_KEY", OPERATOR_KEY)  # the config's interpolation still resolves
    merged, notes = _merged(build, package)
    assert merged.data["sandbox"] == {"gym_runtime": {}, "default_metadata": {"sandbox-api": "opensandbox-sdk"}}
    assert merged.data["judge"]["resources_servers"]["tools"]["sandbox_provider"] == {"gym_runtime": {}}
    assert gate_users(merged) == [] and all("OPENSANDBOX_DOMAIN" in n for n in notes)

    _operator(monkeypatch, None)  # a server, but the operator's mode wins: nothing goes there
    monkeypatch.setenv("GYM_RUNTIME_SANDBOX_PROVIDER", "gym_runtime")
    merged, notes = _merged(build, package)  # and no image check: nothing reaches the OpenSandbox server
    assert merged.data["sandbox"]["gym_runtime"] == {} and gate_users(merged) == []
    assert all("is not used for task sandboxes under this mode" in n for n in notes)


def test_each_naming_server_gets_the_gate_and_a_token_of_its_own(build, package, monkeypatch) -> None:  # noqa: F811
    _operator(monkeypatch, BOTH)
    merged, _ = _merged(build, package)

    class Gate:  # the gate's token table (OpenSandboxGate.token): one secret per server instance
        def token(self, name: str) -> str:
            return f"token-of-{name}"

    patch = gate_patch(Gate(), "127.0.0.1:20017", merged.instances)
    inside = contract.config_view(
        merged.data, {n: ("127.0.0.1", 20000 + i) for i, n in enumerate(merged.instances)}, ("127.0.0.1", 19999), None
    )
    views = {n: yaml.safe_load(contract.server_config_yaml(inside, merged.secrets, n, patch)) for n in merged.instances}
    swe = views["swe"]["sandbox"]["opensandbox"]["connection"]
    assert (swe["domain"], swe["api_key"], swe["use_server_proxy"]) == ("127.0.0.1:20017", "token-of-swe", True)
    judge = views["judge"]["judge"]["resources_servers"]["tools"]["sandbox_provider"]["opensandbox"]["connection"]
    assert (judge["domain"], judge["api_key"]) == ("127.0.0.1:20017", "token-of-judge")
    for other in ("agent", "policy_model"):  # they name no provider: the gate is not theirs
        conn = views[other]["sandbox"]["opensandbox"]["connection"]
        assert conn["domain"] == GATE_PLACEHOLDER and conn["api_key"] in (None, MASK)
        assert "token-of-" not in yaml.safe_dump(views[other])
    assert "token-of-judge" not in yaml.safe_dump(views["swe"]) and "token-of-swe" not in yaml.safe_dump(views["judge"])
    everything = "".join(contract.server_config_yaml(inside, merged.secrets, n, patch) for n in merged.instances)
    assert OPERATOR_KEY not in everything + merged.to_yaml()


@pytest.mark.parametrize(
    ("setting", "refused"),
    [
        (BOTH, []),
        ("registry.example/swe/django:1,docker.io/library/python:3.12-slim", []),  # exact images
        ("registry.example/swe,docker.io/library/python:3.12-slim", ["registry.example/swe/django:1"]),  # no '/': exact
        ("registry.example/sw/,docker.io/library/", ["registry.example/swe/django:1"]),  # a prefix is a path
        ("docker.io/library/python:3.12", ["registry.example/swe/django:1", "docker.io/library/python:3.12-slim"]),
    ],
)
def test_images_are_approved_exactly_or_by_prefix(build, package, monkeypatch, setting, refused) -> None:  # noqa: F811
    _operator(monkeypatch, setting)
    if not refused:
        build(package)
        return
    with pytest.raises(ConfigError) as e:
        build(package)
    got = [v for v in e.value.violations if v.code == "GR-CONFIG-TASK-IMAGE"]
    assert sorted(v.message.split("image ")[1].split(" ")[0].strip("'") for v in got) == sorted(refused)


def test_nothing_approved_refuses_every_server_using_the_block(build, package, monkeypatch) -> None:  # noqa: F811
    _operator(monkeypatch, None)
    with pytest.raises(ConfigError) as e:
        build(package)
    got = {v.key: v for v in e.value.violations}
    assert set(got) == {
        "swe.resources_servers.tools.sandbox_spec.image",
        "judge.resources_servers.tools.sandbox_config.build_image",
    }
    v = got["swe.resources_servers.tools.sandbox_spec.image"]
    assert (
        v.file == "configs/env.yaml" and "server 'swe'" in v.message and "'registry.example/swe/django:1'" in v.message
    )
    assert "GYM_RUNTIME_OPENSANDBOX_TASK_IMAGES" in v.hint and "nothing (unset)" in v.hint
    # a server whose images come only at run time (SandboxSpec.image per row) is refused too: every create would be
    plain = CONFIG.replace("        image: ${oc.env:SWE_IMAGE,registry.example/swe/django:1}\n", "")
    (package / "configs" / "env.yaml").write_text(plain)
    with pytest.raises(ConfigError) as e:
        build(package)
    swe = [v for v in e.value.violations if "'swe'" in v.message]
    assert len(swe) == 1 and swe[0].key == "sandbox" and "approves no image" in swe[0].message


def test_the_setting_refuses_wildcards_and_odd_entries() -> None:
    approved = ApprovedImages.parse(" registry.example/swe/ , python:3.12-slim,")
    assert approved.approves("registry.example/swe/x:1") and approved.approves("python:3.12-slim")
    assert not approved.approves("registry.example/swe/../other/x:1")  # no climbing out of a prefix
    assert not approved.approves("registry.example/swex:1") and not approved.approves(None)
    assert not ApprovedImages.parse("") and not ApprovedImages().approves("python:3.12-slim")
    for bad in ("*", "registry.example/*", "/", "has space:1"):
        with pytest.raises(ValueError):
            ApprovedImages.parse(bad)


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", *args], capture_output=True, text=True, timeout=300, env=env
    )


def test_validate_and_config_refuse_with_one_clear_error(package, tmp_path) -> None:
    env = {
        **os.environ,
        "OPENSANDBOX_DOMAIN": "127.0.0.1:1",
        "OPENSANDBOX_API_KEY": OPERATOR_KEY,
        "GYM_RUNTIME_OPENSANDBOX_TASK_IMAGES": "registry.example/swe/",
        "GYM_RUNTIME_HOME": str(tmp_path / "home"),
    }
    r = _cli(["validate", str(package), "--json"], env)
    assert r.returncode == 1, r.stderr
    (v,) = [v for v in json.loads(r.stdout)["error"]["violations"] if v["code"] == "GR-CONFIG-TASK-IMAGE"]
    assert v["file"] == "configs/env.yaml" and v["key"] == "judge.resources_servers.tools.sandbox_config.build_image"
    assert "server 'judge'" in v["message"] and "'docker.io/library/python:3.12-slim'" in v["message"]
    assert "GYM_RUNTIME_OPENSANDBOX_TASK_IMAGES" in v["hint"]
    policy = ["--policy-base-url", "http://127.0.0.1:8000/v1", "--policy-model-name", "acme-policy"]
    r = _cli(["config", str(package), *policy], env)
    assert r.returncode == 1 and "GR-CONFIG-TASK-IMAGE" in r.stderr and "build_image" in r.stderr
    assert OPERATOR_KEY not in r.stderr + r.stdout

    env["GYM_RUNTIME_OPENSANDBOX_TASK_IMAGES"] = BOTH
    r = _cli(["config", str(package), "--json", *policy], env)
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)
    assert shown["config"]["sandbox"]["opensandbox"]["connection"]["domain"] == GATE_PLACEHOLDER
    assert len(shown["sandbox_providers"]) == 2 and OPERATOR_KEY not in r.stdout + r.stderr
    r = _cli(["config", str(package), *policy], env)  # the text output says it too
    assert (
        r.returncode == 0
        and "# sandbox provider `sandbox` (named by swe.resources_servers.tools."
        "sandbox_provider): 'opensandbox' is kept"
        in r.stdout
    ), r.stdout[-2000:]


@pytest.mark.pypi
@pytest.mark.slow
def test_a_start_whose_opensandbox_server_does_not_answer_stops_before_any_server(tmp_path) -> None:
    from tests.helpers.environments import shared_venvs

    root = Path(__file__).resolve().parents[2] / "examples"
    pkg = tmp_path / "native-quickstart"
    shutil.copytree(root / "native-quickstart", pkg)
    config = pkg / "resources_servers" / "example_arithmetic" / "configs" / "arithmetic.yaml"
    config.write_text(
        config.read_text().replace(
            "      domain: math\n",
            "      domain: math\n      sandbox_provider: sandbox\n      sandbox_spec: {image: 'python:3.12-slim'}\n",
        )
        + "sandbox:\n  opensandbox:\n    connection: {api_key: '${oc.env:OPENSANDBOX_API_KEY}'}\n"
    )
    env = {
        **os.environ,
        **shared_venvs(),
        "GYM_RUNTIME_HOME": str(tmp_path / "home"),
        "OPENSANDBOX_DOMAIN": "127.0.0.1:1",
        "OPENSANDBOX_API_KEY": OPERATOR_KEY,
        "GYM_RUNTIME_OPENSANDBOX_TASK_IMAGES": "python:3.12-slim",
    }
    r = _cli(
        [
            "dry-run",
            str(pkg),
            "--dataset",
            str(root / "native-quickstart.jsonl"),
            "--samples",
            "1",
            "--work-dir",
            str(tmp_path / "run"),
        ],
        env,
    )
    assert r.returncode == 3, r.stderr[-3000:]
    assert "error[GR-OSB-UNREACHABLE]: the OpenSandbox server http://127.0.0.1:1 did not answer" in r.stderr
    assert "starting 7 server(s)" not in r.stderr and OPERATOR_KEY not in r.stdout + r.stderr
    assert "retrying GET" not in r.stderr  # the SDK's own retry lines are not the user's
