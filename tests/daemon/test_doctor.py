"""``gym-runtime doctor``: the egress policy as readable lines (``--json`` keeps the full dict)."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def _doctor(*args: str, **env: str) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if not k.startswith("NMP_RL_SANDBOX_")}
    return subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", "doctor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**e, **env},
    )


def test_egress_is_printed_readably() -> None:
    """The effective allowlist, each entry with its source: built-in, policy endpoint, operator list."""
    r = _doctor(
        NMP_RL_SANDBOX_ALLOW_INTERNET="yes",
        NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW="api.acme.com",
        GYM_RUNTIME_POLICY_BASE_URL="http://127.0.0.1:8000/v1",
    )
    lines = r.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("egress:"))
    block = [line.strip() for line in lines[start : start + 7]]
    assert block[0] == (
        "egress:    deny by default; internet ALLOWED (NMP_RL_SANDBOX_ALLOW_INTERNET); the effective allowlist:"
    )
    assert block[1:6] == [
        "allow 127.0.0.0/8, ::1, localhost  (built-in: the environment's own servers)",
        "allow 127.0.0.1:8000  (policy endpoint, policy_base_url)",
        "allow api.acme.com:80/443  (NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW)",
        "allow *.com:80/443  (built-in while NMP_RL_SANDBOX_ALLOW_INTERNET=true)",
        "allow *.org:80/443  (built-in while NMP_RL_SANDBOX_ALLOW_INTERNET=true)",
    ]
    assert not any("{" in line for line in block)
    off = _doctor(NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW="api.acme.com").stdout
    assert "api.acme.com -- not in effect while internet is off" in off and "allow api.acme.com" not in off


def test_bad_setting_value_exits_1_and_json() -> None:
    """A bad setting value is invalid input: exit 1, as README "Exit codes" says (bug: exit 3)."""
    r = _doctor(NMP_RL_SANDBOX_ALLOW_INTERNET="maybe")
    assert r.returncode == 1 and "egress:    ERROR NMP_RL_SANDBOX_ALLOW_INTERNET='maybe'" in r.stdout
    assert "bad setting values: egress" in r.stdout
    assert _doctor("--json", NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW="bad host!").returncode == 1
    data = json.loads(_doctor("--json").stdout)
    assert data["egress"]["default"] == "deny" and isinstance(data["egress"]["denied_ranges"], list)
    assert data["egress"]["allowlist"][0]["allow"] == "127.0.0.0/8, ::1, localhost"


def test_ray_line_is_not_doubled(capsys) -> None:
    """Bug: doctor printed `ray:       ray: not used ...`."""
    from gym_runtime.cli.main import main

    main(["doctor"])
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("ray:")]
    assert lines and not any(ln.split(":", 1)[1].strip().startswith("ray:") for ln in lines)


def test_package_secrets_per_server(tmp_path, capsys, monkeypatch) -> None:
    """``doctor --package PKG`` names, per server instance, the secret keys it receives (never a value)."""
    from gym_runtime.cli.main import main
    from tests.helpers.packages import make_package

    monkeypatch.setenv("GYM_RUNTIME_POLICY_API_KEY", "sk-doctor-secret")
    root = make_package(tmp_path / "p", "native-v1")
    main(["doctor", "--json", "--package", str(root)])
    out = capsys.readouterr().out
    assert "sk-doctor-secret" not in out
    assert json.loads(out)["secrets"] == {
        "status": "ok",
        "servers": {
            "policy_model": ["policy_api_key", "policy_model.responses_api_models.policy_stub.api_key"],
            "acme_math": [],
            "acme_math_agent": [],
            "acme_math_environment_server": [],
        },
        "passed_env": {"policy_model": [], "acme_math": [], "acme_math_agent": [], "acme_math_environment_server": []},
    }
    main(["doctor", "--package", str(root)])
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("secrets:"))
    assert lines[start : start + 3] == [
        "secrets:   policy_model: policy_api_key, policy_model.responses_api_models.policy_stub.api_key",
        "           acme_math: no secrets",
        "           acme_math_agent: no secrets",
    ]


def test_each_interpreter_with_the_gym_releases_it_can_run(tmp_path) -> None:
    """By the release table's Requires-Python: 3.11 none, 3.12 the 0.4 line up to 0.4.0, 3.13.14+ all."""
    root = tmp_path / "pyenv"
    for version in ("3.11.9", "3.12.1", "3.13.15"):
        exe = root / "versions" / version / "bin" / "python3"
        exe.parent.mkdir(parents=True)
        exe.write_text(f"#!/bin/sh\necho CPython {version}\n")
        exe.chmod(0o755)
    env = {"PYENV_ROOT": str(root), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    pythons = {p["version"]: p["gym_releases"] for p in json.loads(_doctor("--json", **env).stdout)["pythons"]}
    assert pythons["3.11.9"] == [] and pythons["3.12.1"][-1] == "0.4.0" and "0.5.0" not in pythons["3.12.1"]
    assert pythons["3.13.15"][-1] == "0.7.0"
    text = _doctor(**env).stdout
    assert f"3.11.9 {root}/versions/3.11.9/bin/python3 [pyenv] runs no nemo-gym release" in text
    assert f"3.12.1 {root}/versions/3.12.1/bin/python3 [pyenv] runs nemo-gym 0.2.0-0.4.0" in text
    assert f"3.13.15 {root}/versions/3.13.15/bin/python3 [pyenv] runs nemo-gym 0.2.0-0.7.0" in text


def test_package_shows_the_release_and_why(tmp_path) -> None:
    from pathlib import Path

    quickstart = str(Path(__file__).resolve().parents[2] / "examples" / "native-quickstart")
    data = json.loads(_doctor("--json", "--package", quickstart, GYM_RUNTIME_PIN_NEMO_GYM="0.4.0").stdout)
    assert data["gym_release"]["version"] == "0.4.0" and data["gym_release"]["requires_python"] == ">=3.12"
    assert data["gym_release"]["why"] == (
        "no nemo_gym wheel in the package, and the operator pinned it (set by GYM_RUNTIME_PIN_NEMO_GYM)"
    )
    assert (
        "gym:       NeMo Gym 0.4.0 (line 0.4, Requires-Python >=3.12; set by GYM_RUNTIME_PIN_NEMO_GYM): "
        in _doctor("--package", quickstart, GYM_RUNTIME_PIN_NEMO_GYM="0.4.0").stdout
    )


def test_pip_index_settings_uv_ignores_are_named(tmp_path) -> None:
    """uv reads no PIP_* variable and no pip.conf: doctor names each pip index setting and uv's own."""
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://user:secret@pypi.acme.invalid/simple\n")
    env = {
        "PIP_EXTRA_INDEX_URL": "https://extra.acme.invalid/simple",
        "PIP_CONFIG_FILE": str(conf),
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        "XDG_CONFIG_DIRS": str(tmp_path / "none"),
    }
    ignored = json.loads(_doctor("--json", **env).stdout)["uv"]["pip_settings_ignored"]
    assert "PIP_EXTRA_INDEX_URL=https://extra.acme.invalid/simple (uv ignores it; uv reads UV_INDEX)" in ignored
    assert (
        f"{conf} [global] index-url=https://***@pypi.acme.invalid/simple (uv ignores it; uv reads "
        "UV_DEFAULT_INDEX)" in ignored
    )
    assert "secret" not in _doctor(**env).stdout


def test_passed_variables_are_named_per_server_never_their_values(tmp_path, capsys, monkeypatch) -> None:
    """``GYM_RUNTIME_SERVER_ENV``: doctor names the variables (set or not), and with ``--package``
    which server instance gets which; an entry naming no instance is invalid input (exit 1)."""
    from gym_runtime.cli.main import main
    from tests.helpers.packages import make_package

    monkeypatch.setenv("GR_TEST_ROUTER_KEY", "sk-router-secret")
    monkeypatch.setenv("GYM_RUNTIME_SERVER_ENV", "GR_TEST_ROUTER_KEY,acme_math:GR_TEST_JUDGE_KEY")
    root = make_package(tmp_path / "p", "native-v1")
    assert main(["doctor", "--json", "--package", str(root)]) in (0, 3)  # 3: a host problem elsewhere
    out = capsys.readouterr().out
    assert "sk-router-secret" not in out
    data = json.loads(out)
    assert data["server_env"] == [
        {"name": "GR_TEST_ROUTER_KEY", "instance": None, "set": True},
        {"name": "GR_TEST_JUDGE_KEY", "instance": "acme_math", "set": False},
    ]
    shared = {"name": "GR_TEST_ROUTER_KEY", "scope": "every server", "set": True}
    assert data["secrets"]["passed_env"] == {
        "policy_model": [shared],
        "acme_math_agent": [shared],
        "acme_math_environment_server": [shared],
        "acme_math": [shared, {"name": "GR_TEST_JUDGE_KEY", "scope": "this server", "set": False}],
    }
    main(["doctor", "--package", str(root)])
    lines = capsys.readouterr().out.splitlines()
    assert (
        "server env: GR_TEST_ROUTER_KEY, acme_math:GR_TEST_JUDGE_KEY (not set) (GYM_RUNTIME_SERVER_ENV; names only)"
    ) in lines
    start = next(i for i, line in enumerate(lines) if line.startswith("passed:"))
    assert lines[start : start + 4] == [
        "passed:    policy_model: GR_TEST_ROUTER_KEY",
        "           acme_math: GR_TEST_ROUTER_KEY, GR_TEST_JUDGE_KEY (this server, not set)",
        "           acme_math_agent: GR_TEST_ROUTER_KEY",
        "           acme_math_environment_server: GR_TEST_ROUTER_KEY",
    ]
    monkeypatch.setenv("GYM_RUNTIME_SERVER_ENV", "acme_mat:GR_TEST_JUDGE_KEY")
    assert main(["doctor", "--json", "--package", str(root)]) == 1
    err = json.loads(capsys.readouterr().out)["secrets"]["error"]
    assert (
        err["code"] == "GR-SETTINGS-SERVER-ENV"
        and "acme_mat:GR_TEST_JUDGE_KEY names no server instance" in err["message"]
        and err["hint"].startswith("did you mean 'acme_math'?")
    )


def _fake_python(path, version: str):
    path.parent.mkdir(parents=True)
    path.write_text(f"#!/bin/sh\necho CPython {version}\n")
    path.chmod(0o755)
    return path


def test_no_interpreter_for_the_default_release_is_said_with_the_fix_and_gym_runtime_python_is_listed(tmp_path) -> None:
    """A host whose Pythons all predate the default release's Requires-Python gets a hint line; the
    interpreter GYM_RUNTIME_PYTHON names is listed even where the search does not look."""
    from gym_runtime.gym_release import CURRENT

    _fake_python(tmp_path / "pyenv" / "versions" / "3.12.1" / "bin" / "python3", "3.12.1")
    env = {"PYENV_ROOT": str(tmp_path / "pyenv"), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    text = _doctor(**env).stdout
    if sys.version_info < (3, 13, 14):  # the runtime's own interpreter is listed too
        assert f"hint: none runs NeMo Gym {CURRENT} (the default release" in text, text
        assert "--python or GYM_RUNTIME_PYTHON" in text
    own = _fake_python(tmp_path / "elsewhere" / "bin" / "python3", "3.13.15")
    text = _doctor(**env, GYM_RUNTIME_PYTHON=str(own)).stdout
    assert f"3.13.15 {own} [GYM_RUNTIME_PYTHON] runs nemo-gym 0.2.0-{CURRENT}" in text, text
    assert "hint: none runs" not in text
