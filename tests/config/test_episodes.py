"""A ``simple_agent`` without ``max_steps`` is a config warning, never an error (case C38;
gym_runtime/config/episodes.py, docs/rollouts.md "Bounded episodes")."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from gym_runtime.config import build_config
from gym_runtime.config.merge import PolicyValues
from gym_runtime.package import load_package
from tests.examples.conftest import EXAMPLES, ROOT

POLICY = PolicyValues("http://127.0.0.1:1/v1", "k", "m")


def unbounded_copy(tmp: Path) -> Path:
    pkg = tmp / "pkg"
    shutil.copytree(EXAMPLES / "native-quickstart", pkg)
    path = pkg / "resources_servers" / "example_arithmetic" / "configs" / "arithmetic.yaml"
    path.write_text(path.read_text().replace("      max_steps: 2\n", ""))
    return pkg


def test_an_agent_without_max_steps_is_warned_about_with_its_file_and_key(tmp_path: Path) -> None:
    merged = build_config(load_package(unbounded_copy(tmp_path)), [], POLICY)
    [warning] = [w for w in merged.warnings if w.code == "GR-CONFIG-NO-MAX-STEPS"]
    assert warning.file == "resources_servers/example_arithmetic/configs/arithmetic.yaml"
    assert warning.key == "arithmetic_agent.responses_api_agents.simple_agent.max_steps"
    assert "stop at the built-in default of 32 model calls" in warning.message


def test_the_bundled_example_sets_max_steps_and_an_override_can_unset_it() -> None:
    pkg = load_package(EXAMPLES / "native-quickstart")
    assert not [w for w in build_config(pkg, [], POLICY).warnings if w.code == "GR-CONFIG-NO-MAX-STEPS"]
    unset = build_config(pkg, ["code_lookup_agent.responses_api_agents.simple_agent.max_steps=null"], POLICY)
    assert [w.key for w in unset.warnings if w.code == "GR-CONFIG-NO-MAX-STEPS"] == [
        "code_lookup_agent.responses_api_agents.simple_agent.max_steps"
    ]


def test_config_prints_the_warning_and_succeeds(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gym_runtime.cli.main",
            "config",
            str(unbounded_copy(tmp_path)),
            "--policy-base-url",
            "http://127.0.0.1:1/v1",
            "--policy-model-name",
            "m",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "GR-CONFIG-NO-MAX-STEPS" in done.stdout + done.stderr
