"""A CA bundle the daemon's environment names (``SSL_CERT_FILE``, ``SSL_CERT_DIR``,
``REQUESTS_CA_BUNDLE``) reaches servers with the variable AND is visible in their sandbox wherever
it lies: a bundle mounted into a container at ``/run/...`` made every httpx-based server fail at
start with ``FileNotFoundError`` under bubblewrap."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import certifi

from gym_runtime.supervise.contract import trust_paths
from tests.helpers.daemon import FIXTURE_APP, kill_tree, read_ready_line, up_process, write_fixture_package

READS_TRUST = (
    "import os\n"
    "for var in ('SSL_CERT_FILE', 'REQUESTS_CA_BUNDLE'):\n"
    "    open(os.environ[var]).read()\n"
    "assert os.listdir(os.environ['SSL_CERT_DIR'].split(':')[0])\n"
) + FIXTURE_APP


def trust_files(tmp: Path) -> dict[str, str]:
    """A real bundle and a CA directory under ``tmp`` (the sandbox's ``/tmp`` is its own tmpfs)."""
    bundle = tmp / "trust" / "ca-bundle.pem"
    bundle.parent.mkdir()
    shutil.copy(certifi.where(), bundle)
    certs = tmp / "trust" / "certs"
    certs.mkdir()
    shutil.copy(certifi.where(), certs / "one.pem")
    return {"SSL_CERT_FILE": str(bundle), "REQUESTS_CA_BUNDLE": str(bundle), "SSL_CERT_DIR": f"{certs}:/nonexistent"}


def test_trust_paths_are_the_existing_ones(tmp_path: Path) -> None:
    env = trust_files(tmp_path)
    assert trust_paths(env) == [Path(env["SSL_CERT_FILE"]), tmp_path / "trust" / "certs"]
    assert trust_paths({"SSL_CERT_FILE": "relative.pem", "SSL_CERT_DIR": ""}) == []


def test_servers_read_the_ca_bundle_the_daemon_names(tmp_path: Path) -> None:
    pkg = write_fixture_package(
        tmp_path / "pkg",
        {"acme_math": {"resources_servers": {"acme_math": {"domain": "math"}}}},
        apps={"acme_math": READS_TRUST},
    )
    proc = up_process(pkg, tmp_path, "--policy-base-url", "http://127.0.0.1:9/v1", env=trust_files(tmp_path))
    try:
        info = json.loads(read_ready_line(proc))
        assert set(info["servers"]) == {"acme_math"}
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        kill_tree(proc)
