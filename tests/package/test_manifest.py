"""Manifest rules (docs/architecture.md §3): each broken rule yields its code and names file and key."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from gym_runtime.package import check_package
from tests.helpers.packages import make_package, manifest, write_manifest

NAME = "nemo-environment.yaml"


def violations_for(tmp_path: Path, fmt: str, mutate) -> list:
    root = make_package(tmp_path / "pkg", fmt)
    data = copy.deepcopy(manifest(fmt))
    mutate(data)
    write_manifest(root, data)
    pkg, v = check_package(root)
    return v


def codes(v) -> set[str]:
    return {x.code for x in v}


@pytest.mark.parametrize("fmt", ["native-v1", "wheels-v1", "adapter-wheels-v1"])
def test_valid_packages_have_no_violations(tmp_path: Path, fmt: str) -> None:
    pkg, v = check_package(make_package(tmp_path / "p", fmt))
    assert v == []
    assert pkg is not None and pkg.format == fmt and pkg.name == "acme-math-env"
    assert [p.name for p in pkg.config_files] == [Path(c).name for c in manifest(fmt)["config_paths"]]


def _one(v, code: str, key: str | None = None):
    hits = [x for x in v if x.code == code]
    assert hits, f"expected {code}, got {[(x.code, x.key, x.message) for x in v]}"
    x = hits[0]
    assert x.file == NAME
    if key is not None:
        assert x.key == key, (x.key, x.message)
    return x


def test_format_missing_reports_other_problems_too(tmp_path: Path) -> None:
    def m(d):
        del d["format"]
        d["metadata"] = {}
        d["bogus"] = 1

    v = violations_for(tmp_path, "native-v1", m)
    _one(v, "GR-PKG-FORMAT", "format")
    _one(v, "GR-PKG-METADATA", "metadata.name")
    _one(v, "GR-PKG-MANIFEST-UNKNOWN-KEY", "bogus")


def test_format_unknown(tmp_path: Path) -> None:
    v = violations_for(tmp_path, "native-v1", lambda d: d.update(format="native-v2"))
    x = _one(v, "GR-PKG-FORMAT", "format")
    assert "native-v2" in x.message and "wheels-v1" in x.message


@pytest.mark.parametrize("fmt", ["native-v1", "wheels-v1"])
def test_metadata_name_missing_too_long_empty(tmp_path: Path, fmt: str) -> None:
    _one(violations_for(tmp_path / "a", fmt, lambda d: d["metadata"].pop("name")), "GR-PKG-METADATA", "metadata.name")
    _one(
        violations_for(tmp_path / "b", fmt, lambda d: d["metadata"].update(name="x" * 256)),
        "GR-PKG-METADATA",
        "metadata.name",
    )
    _one(
        violations_for(tmp_path / "c", fmt, lambda d: d["metadata"].update(name="")), "GR-PKG-METADATA", "metadata.name"
    )
    _one(violations_for(tmp_path / "d", fmt, lambda d: d.pop("metadata")), "GR-PKG-METADATA", "metadata")
    _one(
        violations_for(tmp_path / "e", fmt, lambda d: d["metadata"].update(description="d" * 2049)),
        "GR-PKG-METADATA",
        "metadata.description",
    )
    assert violations_for(tmp_path / "f", fmt, lambda d: d["metadata"].update(name="x" * 255)) == []


def test_unknown_keys_rejected_everywhere(tmp_path: Path) -> None:
    _one(
        violations_for(tmp_path / "a", "native-v1", lambda d: d.update(sandbox={"egress": "all"})),
        "GR-PKG-MANIFEST-UNKNOWN-KEY",
        "sandbox",
    )
    _one(
        violations_for(tmp_path / "b", "native-v1", lambda d: d["metadata"].update(color="red")),
        "GR-PKG-MANIFEST-UNKNOWN-KEY",
        "metadata.color",
    )
    _one(
        violations_for(tmp_path / "c", "adapter-wheels-v1", lambda d: d["adapter"].update(x=1)),
        "GR-PKG-MANIFEST-UNKNOWN-KEY",
        "adapter.x",
    )


def test_adapter_only_for_adapter_format(tmp_path: Path) -> None:
    for i, fmt in enumerate(["native-v1", "wheels-v1"]):
        x = _one(
            violations_for(tmp_path / str(i), fmt, lambda d: d.update(adapter={"agent": "verifiers_agent"})),
            "GR-PKG-ADAPTER",
            "adapter",
        )
        assert "adapter-wheels-v1" in x.message


def test_adapter_required_for_adapter_format(tmp_path: Path) -> None:
    x = _one(violations_for(tmp_path, "adapter-wheels-v1", lambda d: d.pop("adapter")), "GR-PKG-ADAPTER", "adapter")
    assert "required" in x.message


def test_adapter_agent_must_be_builtin(tmp_path: Path) -> None:
    x = _one(
        violations_for(tmp_path / "a", "adapter-wheels-v1", lambda d: d["adapter"].update(agent="my_agent")),
        "GR-PKG-ADAPTER",
        "adapter.agent",
    )
    assert "my_agent" in x.message and "verifiers_agent" in x.message
    _one(
        violations_for(
            tmp_path / "b", "adapter-wheels-v1", lambda d: d["adapter"].update(agent_type="resources_servers")
        ),
        "GR-PKG-ADAPTER",
        "adapter.agent_type",
    )


@pytest.mark.parametrize(
    "bad", ["../x.yaml", "a/../b.yaml", "./a.yaml", "/etc/passwd", "a\\b.yaml", " a.yaml", "a//b.yaml", ""]
)
def test_config_path_text_rules(tmp_path: Path, bad: str) -> None:
    x = _one(
        violations_for(tmp_path, "wheels-v1", lambda d: d["config_paths"].append(bad)),
        "GR-PKG-CONFIG-PATH",
        "config_paths[2]",
    )
    if bad:
        assert f"'{bad}'" in x.message


def test_config_paths_duplicates(tmp_path: Path) -> None:
    x = _one(
        violations_for(tmp_path, "wheels-v1", lambda d: d["config_paths"].append(d["config_paths"][0])),
        "GR-PKG-CONFIG-DUPLICATE",
        "config_paths[2]",
    )
    assert "configs/policy_model.yaml" in x.message


@pytest.mark.parametrize(
    "fmt,bad",
    [
        ("native-v1", "configs/policy_model.yaml"),
        ("adapter-wheels-v1", "responses_api_models/policy_stub/app.py"),
        ("native-v1", "resources_serversX/a.yaml"),
    ],
)
def test_config_paths_per_format_prefix(tmp_path: Path, fmt: str, bad: str) -> None:
    x = _one(
        violations_for(tmp_path, fmt, lambda d: d["config_paths"].append(bad)),
        "GR-PKG-CONFIG-PREFIX",
        "config_paths[2]",
    )
    assert bad in x.message and fmt in x.message


def test_wheels_v1_configs_anywhere_and_may_be_empty(tmp_path: Path) -> None:
    assert (
        violations_for(
            tmp_path / "a", "wheels-v1", lambda d: d["config_paths"].append("resources_servers/acme_math/app.py")
        )
        == []
    )
    pkg, v = check_package(make_package(tmp_path / "b", "wheels-v1"))
    assert v == []


@pytest.mark.parametrize("fmt", ["native-v1", "adapter-wheels-v1"])
def test_config_paths_empty_rejected(tmp_path: Path, fmt: str) -> None:
    _one(violations_for(tmp_path, fmt, lambda d: d.update(config_paths=[])), "GR-PKG-CONFIG-PATH", "config_paths")


@pytest.mark.parametrize(
    "text,expect",
    [
        ("format: native-v1\nconfig_paths: [a\n", "line 2"),
        ("- format\n- native-v1\n", "list"),
        ("just a string\n", "str"),
        ("", "empty"),
        ("42\n", "int"),
        ("format: native-v1\n  bad: indent\n", "line 2"),
    ],
)
def test_manifest_not_a_valid_mapping(tmp_path: Path, text: str, expect: str) -> None:
    root = make_package(tmp_path / "p")
    (root / NAME).write_text(text)
    pkg, v = check_package(root)
    assert pkg is None
    x = _one(v, "GR-PKG-MANIFEST-YAML")
    assert expect in x.message


def test_manifest_yaml_error_has_line_and_column(tmp_path: Path) -> None:
    root = make_package(tmp_path / "p")
    (root / NAME).write_text("format: native-v1\nmetadata: {name: [x}\n")
    x = _one(check_package(root)[1], "GR-PKG-MANIFEST-YAML")
    assert "line 2, column" in x.message


def test_manifest_non_utf8(tmp_path: Path) -> None:
    root = make_package(tmp_path / "p")
    (root / NAME).write_bytes(b"format: native-v1\nmetadata: {name: \xff\xfe}\n")
    x = _one(check_package(root)[1], "GR-PKG-MANIFEST-YAML")
    assert "UTF-8" in x.message


def test_manifest_missing_and_symlinked_and_directory(tmp_path: Path) -> None:
    root = make_package(tmp_path / "p")
    body = (root / NAME).read_text()
    (root / NAME).unlink()
    assert _one(check_package(root)[1], "GR-PKG-NO-MANIFEST")
    (tmp_path / "real.yaml").write_text(body)
    (root / NAME).symlink_to(tmp_path / "real.yaml")
    x = _one(check_package(root)[1], "GR-PKG-MANIFEST-SYMLINK")
    assert "symlink" in x.message
    (root / NAME).unlink()
    (root / NAME).mkdir()
    x = _one(check_package(root)[1], "GR-PKG-NO-MANIFEST")
    assert "not a file" in x.message


def test_package_path_is_a_file_or_missing(tmp_path: Path) -> None:
    f = tmp_path / "file.yaml"
    f.write_text("x: 1\n")
    pkg, v = check_package(f)
    assert pkg is None and [x.code for x in v] == ["GR-PKG-NOT-A-DIR"] and str(f) in v[0].message
    pkg, v = check_package(tmp_path / "nope")
    assert pkg is None and [x.code for x in v] == ["GR-PKG-NOT-FOUND"]


def test_billion_laughs_aliases_are_refused_quickly(tmp_path: Path) -> None:
    root = make_package(tmp_path / "p")
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    (root / NAME).write_text("\n".join(lines) + "\nformat: native-v1\n")
    x = _one(check_package(root)[1], "GR-PKG-MANIFEST-YAML")
    assert "alias" in x.message


def test_recursive_alias(tmp_path: Path) -> None:
    root = make_package(tmp_path / "p")
    (root / NAME).write_text("format: native-v1\nconfig_paths: &x [*x]\nmetadata: {name: a}\n")
    _one(check_package(root)[1], "GR-PKG-MANIFEST-YAML")


def test_huge_int_and_odd_types(tmp_path: Path) -> None:
    v = violations_for(tmp_path / "a", "native-v1", lambda d: d["metadata"].update(name=10**400))
    _one(v, "GR-PKG-METADATA", "metadata.name")
    v = violations_for(tmp_path / "b", "native-v1", lambda d: d.update(config_paths="one.yaml"))
    _one(v, "GR-PKG-CONFIG-PATH", "config_paths")
    v = violations_for(tmp_path / "c", "native-v1", lambda d: d.__setitem__(5, "x"))
    _one(v, "GR-PKG-MANIFEST-UNKNOWN-KEY", "5")


def test_yaml_dump_roundtrip_of_fixture() -> None:
    assert yaml.safe_load(yaml.safe_dump(manifest("adapter-wheels-v1")))["adapter"]["agent"] == "verifiers_agent"
