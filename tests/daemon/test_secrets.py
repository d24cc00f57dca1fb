"""Secrets reach only the servers whose config references them (docs/architecture.md §4, §6), and
the variables the operator passes (``GYM_RUNTIME_SERVER_ENV``, §7.1) only the servers they are
passed to.

``gym-runtime up`` runs with ``GYM_RUNTIME_POLICY_API_KEY`` set, against an upstream policy
endpoint (the stub model) that requires that key, at ``full`` and at ``partial`` isolation. A
resources server that never mentions the policy model looks for the key in its config, its
environment and every ``/proc/*/environ`` and ``cmdline`` it can read, and must find it nowhere;
the ``policy_model`` server (``api_key: ${policy_api_key}``) finds it in its own config and
authenticates to the upstream with it.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from sandbox import IsolationLevel, probe_isolation
from tests.daemon.conftest import running_stub
from tests.helpers.daemon import kill_tree, read_ready_line, up_process, write_fixture_package

SCAN_APP = r"""# test fixture: looks for a secret wherever this server could read it (tests/daemon/test_secrets.py)
import json, os, urllib.request, urllib.error
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler

name, text = os.environ["NEMO_GYM_CONFIG_PATH"], os.environ["NEMO_GYM_CONFIG_DICT"]
mine, cfg = False, {}
for line in text.splitlines():
    if not line.startswith(" "):
        mine = line == name + ":"
    elif mine and line.startswith("      ") and not line.startswith("       ") and ": " in line:
        k, v = line.strip().split(": ", 1)
        cfg[k] = v.strip("'\"")
needle = cfg["scan_for"][::-1].encode()  # written reversed in the config, so only the key itself matches
out = {"pid": os.readlink("/proc/self"), "shared": os.environ.get("GR_TEST_SHARED"), "config": needle in text.encode(),
       "env": sorted(k for k, v in os.environ.items() if needle in v.encode() or needle in k.encode()),
       "proc": [], "readable": 0}
for pid in (p for p in os.listdir("/proc") if p.isdigit()):
    for what in ("environ", "cmdline"):
        try:
            with open(f"/proc/{pid}/{what}", "rb") as f:
                data = f.read()
        except OSError:
            continue
        out["readable"] += what == "environ"
        if needle in data:
            out["proc"].append(f"/proc/{pid}/{what}")
if "base_url" in cfg:  # the policy model: call the upstream with the key from its own config, and without
    for label, headers in (("with_key", {"Authorization": "Bearer " + cfg["api_key"]}), ("without_key", {})):
        try:
            with urllib.request.urlopen(urllib.request.Request(cfg["base_url"] + "/models", headers=headers),
                                        timeout=10) as r:
                out[label] = r.status
        except urllib.error.HTTPError as e:
            out[label] = e.code
with open(os.path.join(os.environ["HOME"], "scan.json"), "w") as f:
    json.dump(out, f)

class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("content-length", "2"); self.end_headers(); self.wfile.write(b"{}")
    def log_message(self, *a):
        pass

ThreadingHTTPServer((cfg["host"], int(cfg["port"])), H).serve_forever()
"""


@pytest.mark.parametrize("level", ["full", "partial"])
def test_only_the_policy_model_receives_the_policy_key(level: str, tmp_path: Path) -> None:
    if probe_isolation().level != IsolationLevel.FULL:
        pytest.skip("needs a host where bubblewrap runs in a user namespace (full isolation)")
    key = "sk-" + secrets.token_hex(12)
    pkg = write_fixture_package(
        tmp_path / "pkg",
        {
            "acme_math": {"resources_servers": {"acme_math": {"domain": "math", "scan_for": key[::-1]}}},
            "policy_model": {
                "responses_api_models": {
                    "acme_policy": {
                        "scan_for": key[::-1],
                        "base_url": "${policy_base_url}",
                        "api_key": "${policy_api_key}",
                        "model": "${policy_model_name}",
                    }
                }
            },
        },
        apps={"acme_math": SCAN_APP, "acme_policy": SCAN_APP},
    )
    with running_stub("acme-policy-7b", api_key=key) as url:
        proc = up_process(
            pkg,
            tmp_path,
            "--policy-base-url",
            url,
            "--policy-model-name",
            "acme-policy-7b",
            "--isolation",
            level,
            env={"GYM_RUNTIME_POLICY_API_KEY": key},
        )
        try:
            info = json.loads(read_ready_line(proc))
            assert info["isolation"] == level
        finally:
            kill_tree(proc)
    tools = json.loads((tmp_path / "run/servers/acme_math/scan.json").read_text())
    policy = json.loads((tmp_path / "run/servers/policy_model/scan.json").read_text())
    assert tools["readable"] >= 1  # it did read /proc/*/environ: at least its own
    assert tools["config"] is False and tools["env"] == [] and tools["proc"] == [], tools
    assert policy["config"] is True and policy["env"] == ["NEMO_GYM_CONFIG_DICT"]  # its own, and only there
    assert policy["with_key"] == 200 and policy["without_key"] == 401  # it authenticates to the upstream


@pytest.mark.parametrize("level", ["full", "partial"])
def test_a_passed_variable_and_a_named_block_reach_only_their_server(level: str, tmp_path: Path) -> None:
    """``GYM_RUNTIME_SERVER_ENV=acme_swe:GR_TEST_SANDBOX_TOKEN,GR_TEST_SHARED``: the token reaches
    acme_swe's own environment (not bubblewrap's, not a command line) and no other server; the
    ``sandbox`` provider block acme_swe names (``sandbox_provider: sandbox``) reaches acme_swe's
    config with its key, and every other server's masked."""
    if probe_isolation().level != IsolationLevel.FULL:
        pytest.skip("needs a host where bubblewrap runs in a user namespace (full isolation)")
    key = "tok-" + secrets.token_hex(12)
    pkg = write_fixture_package(
        tmp_path / "pkg",
        {
            "acme_swe": {
                "resources_servers": {
                    "acme_swe": {"domain": "coding", "scan_for": key[::-1], "sandbox_provider": "sandbox"}
                }
            },
            "acme_math": {"resources_servers": {"acme_math": {"domain": "math", "scan_for": key[::-1]}}},
        },
        apps={"acme_swe": SCAN_APP, "acme_math": SCAN_APP},
    )
    cfg = pkg / "resources_servers/acme_swe/configs/acme_swe.yaml"
    cfg.write_text(
        cfg.read_text() + "sandbox:\n  opensandbox:\n    connection:\n      api_key: ${oc.env:GR_TEST_SANDBOX_TOKEN}\n"
    )
    proc = up_process(
        pkg,
        tmp_path,
        "--isolation",
        level,
        env={
            "GR_TEST_SANDBOX_TOKEN": key,
            "GR_TEST_SHARED": "for-everyone",
            "GYM_RUNTIME_SERVER_ENV": "acme_swe:GR_TEST_SANDBOX_TOKEN,GR_TEST_SHARED",
            "GYM_RUNTIME_SANDBOX_PROVIDER": "config",
        },
    )  # keep the package's own provider block as written
    try:
        info = json.loads(read_ready_line(proc))
        assert info["isolation"] == level
    finally:
        kill_tree(proc)
    stderr = proc.stderr.read()
    assert key not in stderr and key not in json.dumps(info)
    assert (
        "variables passed to servers (GYM_RUNTIME_SERVER_ENV, names only): acme_swe: GR_TEST_SANDBOX_TOKEN "
        "(this server), GR_TEST_SHARED; acme_math: GR_TEST_SHARED"
    ) in stderr
    swe = json.loads((tmp_path / "run/servers/acme_swe/scan.json").read_text())
    other = json.loads((tmp_path / "run/servers/acme_math/scan.json").read_text())
    assert swe["config"] is True and swe["env"] == ["GR_TEST_SANDBOX_TOKEN", "NEMO_GYM_CONFIG_DICT"]
    # its own environment only (no parent's, no cmdline): the one it started with, or, forked from a
    # preloaded parent, none (the variable reached its os.environ after the fork, above)
    assert swe["proc"] in ([], [f"/proc/{swe['pid']}/environ"]), swe
    assert other["readable"] >= 1
    assert other["config"] is False and other["env"] == [] and other["proc"] == [], other
    assert swe["shared"] == other["shared"] == "for-everyone"
