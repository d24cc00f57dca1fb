"""Session fixtures for the sandbox tests: loopback stand-ins, a CA, uv venvs (shared work)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox import IsolationLevel, probe_isolation
from tests.helpers.egress_targets import make_venv, standin_servers

NAMES = [
    "allowed.example.com",
    "www.example.org",
    "api.example.net",
    "x.hf.co",
    "hf.co",
    "evil.example.net",
    "meta.example.com",
    "pkgs.example.com",
    "pkgs.example.net",
    "*.example.com",
    "*.hf.co",
]


@pytest.fixture(scope="session")
def full_available() -> bool:
    return probe_isolation().level == IsolationLevel.FULL


@pytest.fixture(scope="session")
def standins(tmp_path_factory: pytest.TempPathFactory):
    if os.geteuid() != 0:
        pytest.skip("stand-ins bind ports 80/443 on a 127.x address (needs root)")
    s = standin_servers(tmp_path_factory.mktemp("standins"), NAMES)
    yield s
    s.close()


@pytest.fixture(scope="session")
def client_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A uv venv with httpx + requests when the uv cache has them (else stdlib only)."""
    root = tmp_path_factory.mktemp("venvs")
    py = make_venv(root / "clients", clients=True)
    if py is None:
        py = make_venv(root / "plain")
    return py


@pytest.fixture(scope="session")
def plain_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_venv(tmp_path_factory.mktemp("venvs") / "plain")
