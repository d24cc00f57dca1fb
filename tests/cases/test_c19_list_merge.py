"""Case C19 (tests/cases/data/C19/README.md): a later config replaces a list; say which file won.

Decided and documented (docs/environment-packages.md, "Configuration"): lists follow OmegaConf's
rule, as under Gym's own launcher: a later file's list *replaces* the earlier one. ``gym-runtime
config`` names, for each replaced list, the file in effect and the files it replaced. Egress is
never a package setting: the ``sandbox`` block gets a warning, and the effective allowlist (operator
settings, built-ins, policy endpoints, each with its source) is printed at ``up`` start and served
in ``/health``.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import httpx

from gym_runtime.cli.main import main
from tests.helpers.cases import case_package
from tests.helpers.daemon import FIXTURE_APP, kill_tree, read_ready_line, up_process

KEY = "sandbox.egress_allowlist"
DOMAIN = "acme_judge.resources_servers.acme_judge.domain=other"  # Gym requires one; the sketch has none


def test_c19_config_names_the_file_whose_list_won(tmp_path: Path, capsys) -> None:
    cp = case_package("C19", tmp_path / "pkg")
    base, judge = cp.moved["configs/base_sandbox.yaml"], cp.moved["configs/judge_server.yaml"]
    assert main(["config", str(cp.root), DOMAIN, "--json"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["config"]["sandbox"]["egress_allowlist"] == ["judge-api.example.net"]  # replaced, as documented
    assert data["replaced_lists"] == [{"key": KEY, "winner": judge, "replaced": [base]}]
    assert [w["code"] for w in data["warnings"]] == ["GR-CONFIG-NOT-A-SETTING"]
    assert "warning[GR-CONFIG-NOT-A-SETTING]" in err and "NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW" in err

    assert main(["config", str(cp.root), DOMAIN]) == 0
    out = capsys.readouterr().out
    assert (
        f"# list {KEY}: the list from {judge} is in effect; it replaced the list from {base} "
        "(a later file replaces a list, it never adds to it)"
    ) in out


def test_c19_effective_allowlist_at_up_start_and_in_health(tmp_path: Path) -> None:
    """The operator allows the three hosts the author meant; ``up`` says so with the sources."""
    cp = case_package("C19", tmp_path / "pkg")
    (cp.root / "resources_servers/acme_judge/app.py").write_text(FIXTURE_APP)
    hosts = "pypi.org,files.pythonhosted.org,judge-api.example.net"
    env = {
        "GYM_RUNTIME_HOME": str(tmp_path / "home"),
        "NMP_RL_SANDBOX_ALLOW_INTERNET": "true",
        "NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW": hosts,
    }
    proc = up_process(cp.root, tmp_path, DOMAIN, env=env)
    try:
        info = json.loads(read_ready_line(proc))
        health = httpx.get(info["head_server"] + "/health", trust_env=False, timeout=10).json()
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        kill_tree(proc)
    err = proc.stderr.read()
    allowed = {e["allow"]: e["source"] for e in health["egress"]}
    for host in hosts.split(","):
        assert allowed[f"{host}:80/443"] == "NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW"
        assert f"{host}:80/443 (NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW)" in err
    line = next(ln for ln in err.splitlines() if "egress allowlist (everything else denied)" in ln)
    assert "127.0.0.0/8, ::1, localhost (built-in: the environment's own servers)" in line
    assert "warning[GR-CONFIG-NOT-A-SETTING]" in err
