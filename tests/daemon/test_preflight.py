"""Every setting and flag of ``up`` is checked before any venv build (a fresh GYM_RUNTIME_HOME shows
whether a build started)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers.daemon import kill_tree, simple_env, up_process


def _up(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, Path]:
    home = tmp_path / "home"
    proc = up_process(simple_env(tmp_path / "pkg"), tmp_path, *args, env={"GYM_RUNTIME_HOME": str(home), **(env or {})})
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        raise
    assert out == ""
    return proc.returncode, err, home


def _no_build(err: str, home: Path) -> None:
    assert "venv " not in err and not (home / "venvs").exists() and not (home / "logs").exists()


def test_bad_egress_setting_before_any_build(tmp_path: Path) -> None:
    code, err, home = _up(tmp_path, env={"NMP_RL_SANDBOX_ALLOW_INTERNET": "maybe"})
    assert code == 1 and "GR-SETTINGS-EGRESS" in err and "NMP_RL_SANDBOX_ALLOW_INTERNET" in err and "maybe" in err
    _no_build(err, home)


@pytest.mark.parametrize("level", ["none", "partial"])
def test_conflicting_isolation_flags_are_a_usage_error(tmp_path: Path, level: str) -> None:
    code, err, home = _up(tmp_path, "--require-isolation", "--isolation", level)
    assert code == 2 and "GR-USAGE-CONFLICT" in err and "conflict" in err
    assert "only 'none' is available" not in err and "user namespaces" not in err
    _no_build(err, home)


def test_isolation_the_host_lacks_before_any_build(tmp_path: Path) -> None:
    from sandbox import probe_isolation

    if probe_isolation().level.value == "full":
        pytest.skip("this host gives full isolation: nothing to refuse")
    code, err, home = _up(tmp_path, "--require-isolation")
    assert code == 3 and "GR-SANDBOX-ISOLATION" in err
    _no_build(err, home)
