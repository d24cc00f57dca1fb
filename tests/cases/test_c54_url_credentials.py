"""Case C54 (tests/cases/data/C54/README.md): a credential inside a base URL is a secret.

The case's ``fake_openai.py`` in ``auth`` mode is a gateway that takes basic auth ``alice:PASSWORD``
from the URL's userinfo. The password (and a key-like query parameter) must be masked in ``config``,
the ready line, ``daemon.json`` and ``GET /global_config_dict_yaml``, reach only the server instance
whose config uses the URL, and draw a warning that names ``--policy-api-key-env``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import yaml

from gym_runtime.config import PolicyValues, build_config
from gym_runtime.config.url_secrets import mask_url, url_credentials
from gym_runtime.package import load_package
from gym_runtime.supervise.contract import server_config_yaml
from tests.examples.conftest import ROOT
from tests.helpers.cases import CASES
from tests.helpers.daemon import kill_tree, read_ready_line, simple_env, up_process, write_fixture_package
from tests.helpers.gym_servers import free_port, spawn

CASE = CASES / "C54"
PASSWORD = "S3cretPW-c54"  # the case's FAKE_PASSWORD (run.sh)


def url(port: int) -> str:
    return f"http://alice:{PASSWORD}@127.0.0.1:{port}/v1"


def test_c54_userinfo_and_key_parameters_are_found_and_masked_by_urllib() -> None:
    assert url_credentials(url(1)) == ["userinfo"]
    assert url_credentials("https://g.invalid/v1?key=AIza123&alt=json") == ["query parameter 'key'"]
    assert url_credentials("https://g.invalid/v1?sig=abc&api_key=k&X-Amz-Signature=s") == [
        "query parameter 'sig'",
        "query parameter 'api_key'",
        "query parameter 'X-Amz-Signature'",
    ]
    assert url_credentials("http://127.0.0.1:8000/v1") == [] and url_credentials("no url") == []
    assert mask_url(url(23542)) == "http://****@127.0.0.1:23542/v1"
    assert mask_url("https://[::1]:9/v1?key=AIza123&alt=json") == "https://[::1]:9/v1?key=****&alt=json"
    assert mask_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"


def test_c54_config_masks_the_password_and_warns_with_the_flag_to_use() -> None:
    """run.sh's first step: ``config examples/native-quickstart --policy-base-url URL --json``."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gym_runtime.cli.main",
            "config",
            "examples/native-quickstart",
            "--policy-base-url",
            url(23542),
            "--policy-model-name",
            "fake-model",
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert PASSWORD not in done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["config"]["policy_base_url"] == "http://****@127.0.0.1:23542/v1"
    assert "policy_base_url" in report["masked"]
    receives = {s["name"]: s["secrets"] for s in report["servers"]}
    assert receives.pop("policy_model") == ["policy_base_url", "policy_model.responses_api_models.vllm_model.base_url"]
    assert not any("base_url" in k for keys in receives.values() for k in keys)
    warning = next(w for w in report["warnings"] if w["code"] == "GR-CONFIG-URL-CREDENTIAL")
    assert warning["key"] == "policy_base_url" and "userinfo" in warning["message"]
    assert "--policy-api-key-env" in warning["hint"]


def test_c54_a_key_parameter_in_any_base_url_reaches_only_its_server(tmp_path: Path) -> None:
    """A ``judge_base_url`` with ``?key=`` in a resources server's config: masked in the dump and in
    every other server's view, kept in its own; warned about with its file and key path."""
    pkg = simple_env(tmp_path / "pkg", judge_base_url="https://judge.invalid/v1?key=AIzaJUDGE&alt=json")
    merged = build_config(load_package(pkg), policy=PolicyValues())
    assert "AIzaJUDGE" not in merged.to_yaml()
    assert "key=****&alt=json" in merged.to_yaml()
    views = {n: server_config_yaml(merged.data, merged.secrets, n) for n in merged.instances}
    assert [n for n, text in views.items() if "AIzaJUDGE" in text] == ["acme_math"]
    (w,) = [w for w in merged.warnings if w.code == "GR-CONFIG-URL-CREDENTIAL"]
    assert w.key == "acme_math.resources_servers.acme_math.judge_base_url"
    assert w.file == "resources_servers/acme_math/configs/acme_math.yaml"
    assert "query parameter 'key'" in w.message


def _package(root: Path) -> Path:
    """simple_env plus a ``policy_model`` configured as Gym's vllm_model is (base_url and api_key from
    the job's policy values), all stdlib fixtures."""
    return write_fixture_package(
        root,
        {
            "policy_model": {
                "responses_api_models": {
                    "acme_model": {
                        "base_url": "${policy_base_url}",
                        "api_key": "${policy_api_key}",
                        "model": "${policy_model_name}",
                    }
                }
            },
            "acme_math": {"resources_servers": {"acme_math": {"domain": "math"}}},
            "acme_agent": {
                "responses_api_agents": {
                    "acme_agent": {
                        "resources_server": {"type": "resources_servers", "name": "acme_math"},
                        "model_server": {"type": "responses_api_models", "name": "policy_model"},
                    }
                }
            },
        },
    )


def _holding(root: Path, needle: bytes) -> list[Path]:
    """Files under ``root`` holding ``needle``; files the running daemon removes meanwhile (its
    temporary build and bytecode directories) are skipped."""
    found = []
    for top, _, files in os.walk(root):
        for name in files:
            try:
                if needle in (Path(top) / name).read_bytes():
                    found.append(Path(top) / name)
            except OSError:
                continue
    return found


def _server_environments(pid: int) -> dict[str, str]:
    """Instance name (``NEMO_GYM_CONFIG_PATH``) -> ``NEMO_GYM_CONFIG_DICT`` of each server process
    under ``pid``."""
    out = {}
    for p in psutil.Process(pid).children(recursive=True):
        try:
            env = p.environ()
        except (psutil.AccessDenied, psutil.NoSuchProcess):
            continue
        if "NEMO_GYM_CONFIG_PATH" in env and "NEMO_GYM_CONFIG_DICT" in env:
            out[env["NEMO_GYM_CONFIG_PATH"]] = env["NEMO_GYM_CONFIG_DICT"]
    return out


def test_c54_up_behind_a_basic_auth_gateway_shows_the_password_nowhere(tmp_path: Path) -> None:
    """run.sh's ``up``: the case's gateway (``fake_openai.py PORT auth``) answers only with the
    password, so the endpoint check passing proves the URL still reaches the model server whole."""
    port = free_port()
    env = {**os.environ, "FAKE_PASSWORD": PASSWORD}
    with spawn(
        [sys.executable, str(CASE / "fake_openai.py"), str(port), "auth"],
        tmp_path,
        env,
        f"http://127.0.0.1:{port}",
        tmp_path / "fake.log",
    ):
        proc = up_process(
            _package(tmp_path / "pkg"),
            tmp_path,
            "--policy-base-url",
            url(port),
            "--policy-model-name",
            "fake-model",
            "--isolation",
            "none",
        )
        try:
            line = read_ready_line(proc, timeout=300)
            ready = json.loads(line)
            assert PASSWORD not in line
            assert ready["policy_model"]["base_url"] == f"http://****@127.0.0.1:{port}/v1"
            home = Path(os.environ["GYM_RUNTIME_HOME"])
            assert _holding(home, PASSWORD.encode()) == []
            records = [json.loads(p.read_text()) for p in home.rglob("daemon.json")]
            assert records and f"http://****@127.0.0.1:{port}/v1" in json.dumps(records)
            served = httpx.get(ready["head_server"] + "/global_config_dict_yaml", trust_env=False, timeout=30).text
            assert PASSWORD not in served and f"http://****@127.0.0.1:{port}/v1" in served
            views = _server_environments(proc.pid)
            assert set(views) >= {"policy_model", "acme_math", "acme_agent"}
            assert [n for n, text in views.items() if PASSWORD in text] == ["policy_model"]
            mine = yaml.safe_load(views["policy_model"])
            assert mine["policy_model"]["responses_api_models"]["acme_model"]["base_url"] == url(port)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=120)
        finally:
            kill_tree(proc)
    assert proc.returncode == 0
    assert PASSWORD not in err
    assert "GR-CONFIG-URL-CREDENTIAL" in err and "--policy-api-key-env" in err
    assert '"GET /v1/models HTTP/1.1" 200' in (tmp_path / "fake.log").read_text()
