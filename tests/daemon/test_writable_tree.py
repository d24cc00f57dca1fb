"""A server that installs into its own tree at start-up (a CLI harness fetching Node.js next to its
code, a tree downloading its data): read-only by default, it fails naming the way out; with
``GYM_RUNTIME_WRITABLE_TREES`` it gets a copy-on-write view of its tree, starts, and the package is
left as it was (docs/runtime.md, "Sandbox and egress")."""

from __future__ import annotations

import json
import os
import signal

import pytest

from sandbox import probe_isolation
from tests.helpers.daemon import FIXTURE_APP, kill_tree, read_ready_line, up_process, write_fixture_package

INSTALLS = (
    "from pathlib import Path\n"
    "Path('node_modules/harness').mkdir(parents=True, exist_ok=True)\n"
    "Path('node_modules/harness/index.js').write_text('installed at start-up')\n"
) + FIXTURE_APP


@pytest.fixture()
def pkg(tmp_path):
    if probe_isolation().details.get("bwrap") is None:
        pytest.skip("copy-on-write views need bubblewrap")
    return write_fixture_package(
        tmp_path / "pkg",
        {"acme_cli": {"resources_servers": {"acme_cli": {"domain": "other"}}}},
        apps={"acme_cli": INSTALLS},
        name="acme-cli",
    )


def test_a_tree_that_installs_into_itself_fails_read_only_by_default(pkg, tmp_path):
    proc = up_process(pkg, tmp_path, "--max-restarts", "0", env={"GYM_RUNTIME_HOME": str(tmp_path / "home")})
    try:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 3, err[-3000:]
        assert "GR-START-CRASH" in err and "GYM_RUNTIME_WRITABLE_TREES=acme_cli" in err, err[-3000:]
    finally:
        kill_tree(proc)


def test_a_writable_tree_is_a_copy_on_write_view(pkg, tmp_path):
    env = {"GYM_RUNTIME_HOME": str(tmp_path / "home"), "GYM_RUNTIME_WRITABLE_TREES": "acme_cli"}
    proc = up_process(pkg, tmp_path, env=env)
    try:
        info = json.loads(read_ready_line(proc, timeout=300))
        assert "acme_cli" in info["servers"]
        upper = tmp_path / "run" / "servers" / "acme_cli" / "tree" / "upper"
        assert (upper / "node_modules" / "harness" / "index.js").read_text() == "installed at start-up"
        assert not (pkg / "resources_servers" / "acme_cli" / "node_modules").exists()
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        kill_tree(proc)
