"""Helpers for config tests: a wheels-v1 package whose configs a test writes itself."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from gym_runtime.config import MergedConfig, PolicyValues, build_config
from gym_runtime.package import load_package
from tests.helpers.packages import manifest, write_manifest, write_server, write_wheel

POLICY = PolicyValues("http://127.0.0.1:8000/v1", "sk-test-secret", "acme-policy")
Build = Callable[..., MergedConfig]


@pytest.fixture
def builtins(tmp_path: Path) -> Path:
    """A built-in ``servers/`` root holding only the relay ``environment_servers/legacy_agent``
    (the runtime always has it: the 0.7 line generates one in front of every agent no environment
    server names); tests add other trees to it."""
    d = tmp_path / "builtin_servers"
    d.mkdir()
    write_server(d, "environment_servers", "legacy_agent")
    return d


@pytest.fixture
def pkg_with(tmp_path: Path, builtins: Path) -> Callable[..., Path]:
    """``pkg_with({"configs/a.yaml": {...} or "text"}, servers=[(type, impl)])`` -> package root."""

    def make(configs: dict[str, object], servers: list[tuple[str, str]] | None = None) -> Path:
        root = tmp_path / "pkg"
        root.mkdir(exist_ok=True)
        m = manifest("wheels-v1")
        m["config_paths"] = list(configs)
        write_manifest(root, m)
        write_wheel(root / "wheels", "pip-24.0-py3-none-any.whl")
        for rel, body in configs.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            if isinstance(body, bytes):
                (root / rel).write_bytes(body)
            else:
                (root / rel).write_text(body if isinstance(body, str) else yaml.safe_dump(body, sort_keys=False))
        for st, impl in servers or []:
            write_server(root, st, impl)
        return root

    return make


@pytest.fixture
def build(builtins: Path) -> Build:
    def run(root: Path, overrides: list[str] | None = None, policy: PolicyValues | None = POLICY) -> MergedConfig:
        return build_config(load_package(root), overrides, policy, builtin_root=builtins)

    return run
