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
