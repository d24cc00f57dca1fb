"""Case C29 (tests/cases/data/C29/README.md): an escaped ``\\${...}`` reaches the servers as the literal.

The package is the case's own ``pkg/`` (native-v1, built-in ``example_arithmetic`` with
``judge_template: 'Compare \\${candidate} with \\${reference}; costs are in $USD.'``). The daemon
resolves the config once and writes every string escaped into ``NEMO_GYM_CONFIG_DICT``, so each
later resolution (our server kit, Gym's ``get_global_config_dict``) gives the literal back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gym_runtime.cli.main import main
from gym_runtime.config import PolicyValues, build_config
from gym_runtime.package import load_package
from gym_runtime.supervise.contract import config_view, to_yaml
from tests.helpers.cases import case_dir

ROOT = Path(__file__).resolve().parents[2]
PKG = case_dir("C29") / "pkg"
ROWS = case_dir("C29") / "rows.jsonl"
LITERAL = "Compare ${candidate} with ${reference}; costs are in $USD."
POLICY = PolicyValues("http://127.0.0.1:29999/v1", "dummy", "m1")


def child_yaml() -> str:
    """The ``NEMO_GYM_CONFIG_DICT`` the daemon hands every server of the case package."""
    merged = build_config(load_package(PKG), [], POLICY)
    addresses = {n: ("127.0.0.1", 20000 + i) for i, n in enumerate(merged.instances)}
    return to_yaml(config_view(merged.data, addresses, ("127.0.0.1", 11000), None))


def test_c29_config_prints_the_literal(capsys) -> None:
    """``gym-runtime config`` shows the value the author meant (README "Expected": config output)."""
    code = main(["config", str(PKG), "--policy-base-url", POLICY.base_url, "--policy-model-name", "m1", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["config"]["acme_calc"]["resources_servers"]["example_arithmetic"]["judge_template"] == LITERAL


def test_c29_server_kit_resolves_the_literal_every_time() -> None:
    """The server side of the hand-off (servers/_kit/config.py, as example_arithmetic and simple_agent
    read it, the agent through its reference to acme_calc) in a real process."""
    script = (
        "import json, sys; sys.path.insert(0, 'servers'); from _kit.config import load_global_config, resolved;"
        "cfg = load_global_config();"
        "print(json.dumps([resolved(cfg, 'acme_calc')['judge_template'] for _ in range(3)]))"
    )
    env = {**os.environ, "NEMO_GYM_CONFIG_DICT": child_yaml(), "NEMO_GYM_CONFIG_PATH": "acme_calc_agent"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [LITERAL] * 3


@pytest.mark.pypi
def test_c29_dry_run_succeeds_without_restarts(tmp_path: Path) -> None:
    """End to end: both servers start at once (no "Interpolation key 'candidate' not found", no restart)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gym_runtime.cli.main",
            "dry-run",
            str(PKG),
            "--dataset",
            str(ROWS),
            "--samples",
            "1",
            "--work-dir",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        env={**os.environ, "GYM_RUNTIME_HOME": str(tmp_path / "home")},
    )
    assert done.returncode == 0, done.stderr
    assert "restart" not in done.stderr and "Interpolation" not in done.stderr


@pytest.mark.pypi
@pytest.mark.slow
def test_c29_gyms_own_parser_in_a_server_venv_gets_the_literal(tmp_path: Path) -> None:
    """NeMo Gym 0.4.0's ``get_global_config_dict`` + ``get_first_server_config_dict`` (what
    ``load_config_from_global_config`` resolves) inside the case's resources-server venv, built by
    ``gym-runtime build`` in pin mode ``gym`` (nemo-gym, ray, openai in every venv, Gym's contract).
    Venvs are kept in the test cache between runs."""
    from tests.helpers.gym_package import cache_dir, python_312_plus

    python = python_312_plus()
    if python is None:
        pytest.skip("no Python >= 3.12 under pyenv (nemo-gym 0.4.0 requires it)")
    env = {
        **os.environ,
        "GYM_RUNTIME_PIN_MODE": "gym",
        "GYM_RUNTIME_PIN_NEMO_GYM": "0.4.0",
        "GYM_RUNTIME_PIN_OPENAI": "2.7.2",
        "GYM_RUNTIME_VENV_DIR": str(cache_dir() / "venvs"),
        "GYM_RUNTIME_HOME": str(tmp_path / "home"),
    }
    built = subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", "build", str(PKG), "--python", python, "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=1800,
        env=env,
    )
    assert built.returncode == 0, built.stderr
    venv_python = json.loads(built.stdout)["servers"]["acme_calc"]["python"]
    script = (
        "import json; from omegaconf import OmegaConf;"
        "from nemo_gym.global_config import get_global_config_dict, get_first_server_config_dict;"
        "g = get_global_config_dict(); inner = get_first_server_config_dict(g, 'acme_calc');"
        "print(json.dumps([OmegaConf.to_container(inner, resolve=True)['judge_template'] for _ in range(2)]"
        " + [g.acme_calc.resources_servers.example_arithmetic.judge_template]))"
    )
    child = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "NEMO_GYM_CONFIG_DICT": child_yaml(),
        "NEMO_GYM_CONFIG_PATH": "acme_calc",
    }
    done = subprocess.run(
        [venv_python, "-c", script], capture_output=True, text=True, cwd=tmp_path, env=child, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [LITERAL] * 3
    assert (
        yaml.safe_load(child["NEMO_GYM_CONFIG_DICT"])["acme_calc"]["resources_servers"]["example_arithmetic"][
            "judge_template"
        ]
        == "Compare \\${candidate} with \\${reference}; costs are in $USD."
    )
