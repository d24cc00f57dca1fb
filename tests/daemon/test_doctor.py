"""``gym-runtime doctor``: the egress policy as readable lines (``--json`` keeps the full dict)."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def _doctor(*args: str, **env: str) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if not k.startswith("NMP_RL_SANDBOX_")}
    return subprocess.run([sys.executable, "-m", "gym_runtime.cli.main", "doctor", *args], capture_output=True,
                          text=True, timeout=120, env={**e, **env})


def test_egress_is_printed_readably() -> None:
    r = _doctor(NMP_RL_SANDBOX_ALLOW_INTERNET="yes", NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW="api.acme.com")
    lines = r.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("egress:"))
    block = lines[start:start + 5]
    assert block[0] == "egress:    deny by default; internet ALLOWED (NMP_RL_SANDBOX_ALLOW_INTERNET)"
    assert "allowed names: api.acme.com, *.com, *.org (ports 80, 443)" in block[2]
    assert not any("{" in line for line in block)


def test_egress_error_and_json() -> None:
    r = _doctor(NMP_RL_SANDBOX_ALLOW_INTERNET="maybe")
    assert r.returncode == 3 and "egress:    ERROR NMP_RL_SANDBOX_ALLOW_INTERNET='maybe'" in r.stdout
    data = json.loads(_doctor("--json").stdout)
    assert data["egress"]["default"] == "deny" and isinstance(data["egress"]["denied_ranges"], list)


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
    assert json.loads(out)["secrets"] == {"status": "ok", "servers": {
        "policy_model": ["policy_api_key", "policy_model.responses_api_models.policy_stub.api_key"],
        "acme_math": [], "acme_math_agent": []}}
    main(["doctor", "--package", str(root)])
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("secrets:"))
    assert lines[start:start + 3] == [
        "secrets:   policy_model: policy_api_key, policy_model.responses_api_models.policy_stub.api_key",
        "           acme_math: no secrets", "           acme_math_agent: no secrets"]
