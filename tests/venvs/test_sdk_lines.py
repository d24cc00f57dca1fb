"""Requirement lines pointing at the Gym SDK, and the local path lines ``validate`` cannot honour.

NeMo Gym 0.4.0 ``nemo_gym/cli/setup_command.py`` (run from its wheel) drops every requirements
line pointing at ``../..`` and installs ``nemo-gym==<its version>`` instead; Gym trees spell that
line several ways (``resources_servers/arc_agi`` has the single line ``-e ../../``). Every
spelling must install the pinned ``nemo-gym`` (offline here: a ``file://`` index of tiny wheels),
and any other local path line that uv cannot install is named by ``validate`` and by the build's
preflight with its file, line and a hint. The real arc_agi tree is in
``tests/daemon/test_real_gym_trees.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym_runtime.cli.main import main
from gym_runtime.errors import BuildError
from gym_runtime.venvs import build_venvs, plan_venvs
from gym_runtime.venvs.store import MARKER
from tests.helpers.gym_python import current_gym_python  # noqa: F401 - a fixture
from tests.helpers.index import write_simple_index
from tests.helpers.wheels import build_wheel
from tests.venvs.conftest import merged_config, synthetic_pkg

SDK_SPELLINGS = (
    "-e nemo-gym[dev] @ ../../",
    "-e nemo-gym[dev] @ ../..",
    "-e nemo-gym[dev,sandbox] @ ../../",
    "-e ../..",
    "-e ../../",
    "../../",
    "../..",
    "-e ../../[dev]",
    "nemo-gym @ ../../",
    "nemo-gym[dev] @ ../../",
    "nemo-gym @ file:../..",
)


def _validate(capsys, pkg: Path) -> tuple[int, list[dict]]:
    code = main(["validate", str(pkg), "--json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, (json.loads(out[: out.rindex("}") + 1])["error"]["violations"] if code else [])


def test_every_sdk_spelling_installs_the_pinned_nemo_gym(
    tmp_path: Path, make_settings, capsys, current_gym_python
) -> None:
    files = tmp_path / "files"
    for name, version in (("nemo-gym", "0.4.0"), ("ray", "2.60.0"), ("openai", "2.7.2"), ("tinyparse", "0.3.0")):
        build_wheel(files, name, version)
    settings = make_settings(write_simple_index(files, tmp_path / "idx"))
    digests: dict[str, set[str]] = {}
    for i, line in enumerate(SDK_SPELLINGS):
        pkg = synthetic_pkg(tmp_path / f"pkg{i}", {"arc": ("resources_servers", f"{line}\ntinyparse\n")})
        assert _validate(capsys, pkg) == (0, []), line
        vp = plan_venvs(merged_config(pkg), settings).for_instance("arc")
        extras = "[dev]" if "[dev]" in line else "[dev,sandbox]" if "sandbox" in line else ""
        want = f"nemo-gym{extras}==0.4.0"  # the line's extras kept, as Gym's checkout install has them
        assert any(f"`{line}` replaced by `{want}`" in n for n in vp.notes), (line, vp.notes)
        assert vp.source.uses_gym_sdk and not vp.pins[0].as_constraint  # auto mode: an SDK server
        digests.setdefault(want, set()).add(vp.digest)
    assert all(len(d) == 1 for d in digests.values())  # one rendered file per SDK request: one venv each
    arc = SDK_SPELLINGS.index("-e ../../")  # arc_agi's line
    v = build_venvs(plan_venvs(merged_config(tmp_path / f"pkg{arc}"), settings), settings).for_instance("arc")
    installed = json.loads((v.path / MARKER).read_text())["installed"]
    assert installed["nemo-gym"] == "0.4.0" and installed["tinyparse"] == "0.3.0"


def _package_with_lines(root: Path, lines: str) -> Path:
    pkg = synthetic_pkg(root, {"acme": ("resources_servers", lines)})
    srv = pkg / "resources_servers" / "acme"
    (srv / "notes").mkdir()  # a directory, but no Python project
    (srv / "notes" / "README.md").write_text("notes\n")
    (srv / "data.txt").write_text("not an archive\n")
    proj = pkg / "resources_servers" / "common"  # a real project inside the package: honoured
    proj.mkdir()
    (proj / "pyproject.toml").write_text("[project]\nname = 'common'\nversion = '1.0'\n")
    return pkg


def test_validate_names_local_path_lines_it_cannot_honour(
    tmp_path: Path, capsys, make_settings, current_gym_python
) -> None:
    pkg = _package_with_lines(
        tmp_path / "pkg", "-e ../../\n-e ../common\n-e ./missing_lib\n-e ../../../outside\n./notes\n./data.txt\n"
    )
    code, errors = _validate(capsys, pkg)
    assert code == 1 and [e["code"] for e in errors] == ["GR-BUILD-LOCAL-PATH"] * 4
    assert {e["file"] for e in errors} == {"resources_servers/acme/requirements.txt"}
    assert [e["key"] for e in errors] == ["line 3", "line 4", "line 5", "line 6"]
    missing, outside, notes, data = (e["message"] for e in errors)
    assert "`-e ./missing_lib` points at resources_servers/acme/missing_lib, which does not exist" in missing
    assert "`-e ../../../outside` points outside the package" in outside
    assert "`./notes` points at resources_servers/acme/notes, a directory that is not a Python project" in notes
    assert "`./data.txt` points at resources_servers/acme/data.txt, a file that is neither a wheel nor an sdist" in data
    assert all("ship the project inside the package" in e["hint"] and "@ ../../" in e["hint"] for e in errors)
    with pytest.raises(BuildError) as ei:  # the build stops on the same lines before uv runs
        plan_venvs(merged_config(pkg), make_settings())
    assert ei.value.code == "GR-BUILD-PREFLIGHT"
    assert [(v.code, v.key) for v in ei.value.violations] == [(e["code"], e["key"]) for e in errors]


def test_a_nested_implementations_sdk_line_is_one_level_deeper(tmp_path: Path) -> None:
    """A nested implementation (``responses_api_agents/conversational_tool_use/simulation/``, NeMo Gym
    0.7.0) points at the Gym checkout with ``../../../``: that is the SDK, pinned like ``../..``
    elsewhere, and its own ``../..`` (the group directory) is a local path like any other."""
    from gym_runtime.package.requirements import read_install_source, sdk_root

    d = tmp_path / "pkg/responses_api_agents/conversational_tool_use/simulation"
    d.mkdir(parents=True)
    (d / "requirements.txt").write_text("-e nemo-gym[dev] @ ../../../\njson-repair==0.53.0\n-e ../..\n")
    assert sdk_root(d / "requirements.txt") == "../../.."
    assert sdk_root(tmp_path / "pkg/resources_servers/arc_agi/requirements.txt") == "../.."
    lines = read_install_source(d / "requirements.txt", server="conversational_tool_use_agent").lines
    assert [(ln.gym_sdk, ln.extras) for ln in lines] == [(True, ("dev",)), (False, ()), (False, ())]
