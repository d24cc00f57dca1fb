"""Servers asking uv for the same requirements share one venv, whatever their install file's kind."""

from __future__ import annotations

import json
from pathlib import Path

from gym_runtime.venvs import build_venvs, plan_venvs
from gym_runtime.venvs.store import MARKER
from tests.helpers.index import write_simple_index
from tests.helpers.wheels import build_wheel
from tests.venvs.conftest import merged_config, synthetic_pkg

GYM_LINE = "# SPDX header as in Gym's trees\n\n-e nemo-gym[dev] @ ../../\n"


def _gym_index(tmp_path: Path) -> str:
    files = tmp_path / "files"
    build_wheel(files, "nemo-gym", "0.4.0", requires=['tinytest; extra == "dev"'], extras=["dev"])
    build_wheel(files, "tinytest", "1.0.0")
    build_wheel(files, "ray", "2.60.0")
    build_wheel(files, "openai", "2.7.2")
    return write_simple_index(files, tmp_path / "idx")


def test_pyproject_and_requirements_servers_of_the_gym_sdk_share_one_venv(tmp_path: Path, make_settings) -> None:
    pkg = synthetic_pkg(
        tmp_path / "pkg",
        {
            "tool": ("resources_servers", GYM_LINE),
            "tool_agent": ("responses_api_agents", GYM_LINE),
            "policy_model": ("responses_api_models", ""),
        },
    )
    model_dir = pkg / "responses_api_models" / "policy_model"
    (model_dir / "requirements.txt").unlink()  # Gym's vllm_model: a local pyproject asking for nemo-gym[dev]
    (model_dir / "pyproject.toml").write_text(
        '[project]\nname = "vllm-model"\nversion = "0.2.0"\n'
        'requires-python = ">=3.11"\ndependencies = ["nemo-gym[dev]"]\n'
        '[tool.uv.sources]\nnemo-gym = { path = "../..", editable = true }\n'
    )
    settings = make_settings(_gym_index(tmp_path))
    plan = plan_venvs(merged_config(pkg), settings)
    assert len(plan.venvs) == 1, [v.to_dict() for v in plan.venvs]
    vp = plan.venvs[0]
    assert set(vp.instances) == {"tool", "tool_agent", "policy_model"}
    assert any("replaced by `nemo-gym[dev]==0.4.0`" in n for n in vp.notes), vp.notes
    venvs = build_venvs(plan, settings)
    assert venvs.built == 1
    assert len({venvs.for_instance(n).path for n in ("tool", "tool_agent", "policy_model")}) == 1
    installed = json.loads((venvs.venvs[0].path / MARKER).read_text())["installed"]
    assert installed["nemo-gym"] == "0.4.0" and installed["tinytest"] == "1.0.0", "the line's [dev] extra is kept"


def test_different_requirements_still_get_their_own_venvs(tmp_path: Path, make_settings) -> None:
    pkg = synthetic_pkg(
        tmp_path / "pkg",
        {"tool": ("resources_servers", GYM_LINE), "other": ("resources_servers", "-e nemo-gym @ ../../\n")},
    )
    plan = plan_venvs(merged_config(pkg), make_settings(_gym_index(tmp_path)))
    assert len(plan.venvs) == 2  # without the [dev] extra the closure differs
