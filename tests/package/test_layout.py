"""Layout rules that need the filesystem (docs/architecture.md §3): config files, symlinks, .jsonl, server dirs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gym_runtime.errors import PackageInvalidError
from gym_runtime.package import check_package, load_package
from tests.helpers.packages import make_package, manifest, write_manifest, write_server


def _only(v, code: str):
    hits = [x for x in v if x.code == code]
    assert hits, f"expected {code}, got {[(x.code, x.file, x.key, x.message) for x in v]}"
    return hits


def _with_paths(root: Path, fmt: str, paths: list[str]) -> list:
    m = manifest(fmt)
    m["config_paths"] = paths
    write_manifest(root, m)
    return check_package(root)[1]


def test_config_path_missing_and_directory(tmp_path: Path) -> None:
    root = make_package(tmp_path / "p", "wheels-v1")
    v = _with_paths(root, "wheels-v1", ["configs/policy_model.yaml", "configs/nope.yaml", "configs"])
    hits = _only(v, "GR-PKG-CONFIG-MISSING")
    assert [(h.file, h.key) for h in hits] == [
        ("nemo-environment.yaml", "config_paths[1]"),
        ("nemo-environment.yaml", "config_paths[2]"),
    ]
    assert "configs/nope.yaml" in hits[0].message


def test_config_symlink_file(tmp_path: Path) -> None:
    root = make_package(tmp_path / "p", "wheels-v1")
    os.symlink("acme_math.yaml", root / "configs/link.yaml")
    h = _only(
        _with_paths(root, "wheels-v1", ["configs/policy_model.yaml", "configs/link.yaml"]), "GR-PKG-CONFIG-SYMLINK"
    )[0]
    assert h.key == "config_paths[1]" and "configs/link.yaml" in h.message


def test_config_symlinked_parent_dir(tmp_path: Path) -> None:
    root = make_package(tmp_path / "p", "wheels-v1")
    os.symlink("configs", root / "cfglink")
    h = _only(
        _with_paths(root, "wheels-v1", ["configs/policy_model.yaml", "cfglink/acme_math.yaml"]), "GR-PKG-CONFIG-SYMLINK"
    )[0]
    assert h.key == "config_paths[1]" and "cfglink" in h.message


def test_config_escape_via_symlink_outside(tmp_path: Path) -> None:
    root = make_package(tmp_path / "p", "wheels-v1")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside/evil.yaml").write_text("x: 1\n")
    os.symlink(tmp_path / "outside", root / "configs/out")
    v = _with_paths(root, "wheels-v1", ["configs/policy_model.yaml", "configs/out/evil.yaml"])
    assert {x.code for x in v} >= {"GR-PKG-CONFIG-SYMLINK", "GR-PKG-CONFIG-ESCAPE"}
    esc = _only(v, "GR-PKG-CONFIG-ESCAPE")[0]
    assert esc.key == "config_paths[1]" and "configs/out/evil.yaml" in esc.message


def test_package_root_reached_through_symlink_is_fine(tmp_path: Path) -> None:
    root = make_package(tmp_path / "p", "native-v1")
    os.symlink(root, tmp_path / "alias")
    assert check_package(tmp_path / "alias")[1] == []


@pytest.mark.parametrize("where", ["data/train.jsonl", "resources_servers/acme_math/data/x.JSONL", "top.jsonl"])
def test_jsonl_anywhere(tmp_path: Path, where: str) -> None:
    root = make_package(tmp_path / "p", "native-v1")
    (root / where).parent.mkdir(parents=True, exist_ok=True)
    (root / where).write_text("{}\n")
    h = _only(check_package(root)[1], "GR-PKG-JSONL")
    assert [x.file for x in h] == [where]


def test_server_dir_with_both_install_files(tmp_path: Path) -> None:
    root = make_package(tmp_path / "p", "native-v1")
    (root / "resources_servers/acme_math/pyproject.toml").write_text("[project]\nname='x'\nversion='0'\n")
    h = _only(check_package(root)[1], "GR-PKG-SERVER-BOTH")[0]
    assert h.file == "resources_servers/acme_math/"


def test_server_dir_with_neither_is_reported_not_shadowed(tmp_path: Path) -> None:
    root = make_package(tmp_path / "p", "native-v1")
    d = root / "responses_api_agents/simple_agent"
    d.mkdir(parents=True)
    (d / "app.py").write_text("print(1)\n")
    h = _only(check_package(root)[1], "GR-PKG-SERVER-NO-INSTALL")[0]
    assert h.file == "responses_api_agents/simple_agent/" and "shadow" in h.message


def test_configs_only_dir_configures_a_builtin(tmp_path: Path) -> None:
    root = make_package(tmp_path / "p", "native-v1")
    (root / "responses_api_agents/simple_agent/configs").mkdir(parents=True)
    (root / "responses_api_agents/simple_agent/configs/a.yaml").write_text("{}\n")
    pkg, v = check_package(root)
    assert v == [] and ("responses_api_agents", "simple_agent") not in pkg.server_dirs


def test_server_dir_symlink_outside_package(tmp_path: Path) -> None:
    root = make_package(tmp_path / "p", "native-v1")
    write_server(tmp_path / "elsewhere", "resources_servers", "stolen")
    os.symlink(tmp_path / "elsewhere/resources_servers/stolen", root / "resources_servers/stolen")
    h = _only(check_package(root)[1], "GR-PKG-ESCAPE")[0]
    assert h.file == "resources_servers/stolen"


def test_all_violations_collected_together(tmp_path: Path) -> None:
    root = make_package(tmp_path / "p", "wheels-v1")
    (root / "a.jsonl").write_text("{}\n")
    (root / "wheels/README.txt").write_text("x")
    (root / "resources_servers/acme_math/requirements.txt").unlink()
    m = manifest("wheels-v1")
    m["config_paths"].append("configs/missing.yaml")
    write_manifest(root, m)
    with pytest.raises(PackageInvalidError) as e:
        load_package(root)
    assert {v.code for v in e.value.violations} == {
        "GR-PKG-JSONL",
        "GR-PKG-WHEELS-NON-WHEEL",
        "GR-PKG-SERVER-NO-INSTALL",
        "GR-PKG-CONFIG-MISSING",
    }
    assert e.value.code == "GR-PKG-INVALID" and e.value.exit_code == 1


def test_non_utf8_file_names_do_not_crash(tmp_path: Path) -> None:
    root = make_package(tmp_path / "p", "native-v1")
    (root / "data\udcff.jsonl").write_text("{}")
    h = _only(check_package(root)[1], "GR-PKG-JSONL")
    assert len(h) == 1


def test_unresolvable_paths_are_violations_not_crashes(tmp_path: Path) -> None:
    root = make_package(tmp_path / "p", "wheels-v1")
    os.symlink("loop2.yaml", root / "configs/loop.yaml")
    os.symlink("loop.yaml", root / "configs/loop2.yaml")
    v = _with_paths(root, "wheels-v1", ["configs/" + "a" * 300 + ".yaml", "configs/loop.yaml", "configs/a\x00.yaml"])
    assert [(x.code, x.key) for x in v] == [("GR-PKG-CONFIG-PATH", "config_paths[2]")]
    v = _with_paths(root, "wheels-v1", ["configs/" + "a" * 300 + ".yaml", "configs/loop.yaml"])
    assert [(x.code, x.key) for x in v] == [
        ("GR-PKG-CONFIG-MISSING", "config_paths[0]"),
        ("GR-PKG-CONFIG-SYMLINK", "config_paths[1]"),
    ]
    assert check_package("x" * 5000)[1][0].code == "GR-PKG-NOT-FOUND"
    assert check_package("a\x00b")[1][0].code == "GR-PKG-NOT-FOUND"


def test_nested_implementations_are_found_by_their_path(tmp_path: Path) -> None:
    """NeMo Gym 0.7.0 names implementations with a slash (``conversational_tool_use/simulation``):
    the tree is ``responses_api_agents/conversational_tool_use/simulation/``, below a directory that
    may itself be a server (Gym's holds a requirements.txt) or only group servers."""
    root = make_package(tmp_path / "p", "native-v1")
    group = root / "responses_api_agents/conversational_tool_use"
    for impl in ("simulation", "domain_generation"):
        (group / impl / "configs").mkdir(parents=True)
        (group / impl / "app.py").write_text("print(1)\n")
        (group / impl / "requirements.txt").write_text("-e nemo-gym[dev] @ ../../../\n")
    (group / "simulation/tests").mkdir()  # no install file: part of the tree, not an implementation
    pkg, v = check_package(root)
    assert v == []  # the group holds no install file, and is no server without one
    nested = {k: d for k, d in pkg.server_dirs.items() if k[1].startswith("conversational_tool_use")}
    assert set(nested) == {
        ("responses_api_agents", "conversational_tool_use/simulation"),
        ("responses_api_agents", "conversational_tool_use/domain_generation"),
    }
    assert nested[("responses_api_agents", "conversational_tool_use/simulation")].path == group / "simulation"
    (group / "requirements.txt").write_text("-e nemo-gym[dev] @ ../../\n")  # as in Gym's wheel: a server too
    pkg, v = check_package(root)
    assert v == [] and ("responses_api_agents", "conversational_tool_use") in pkg.server_dirs
    assert ("responses_api_agents", "conversational_tool_use/simulation") in pkg.server_dirs


def test_a_nested_implementation_with_both_install_files_is_reported(tmp_path: Path) -> None:
    root = make_package(tmp_path / "p", "native-v1")
    d = root / "responses_api_agents/group/impl"
    d.mkdir(parents=True)
    (d / "requirements.txt").write_text("# none\n")
    (d / "pyproject.toml").write_text("[project]\nname='x'\nversion='0'\n")
    assert _only(check_package(root)[1], "GR-PKG-SERVER-BOTH")[0].file == "responses_api_agents/group/impl/"
