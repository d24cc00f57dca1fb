"""Wheelhouse rules and wheel tags against a target (docs/architecture.md §3; packaging.tags semantics)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gym_runtime.package import check_package, parse_target
from tests.helpers.packages import make_package, write_wheel


def _codes(v) -> list[str]:
    return [x.code for x in v]


def _pkg(tmp_path: Path, fmt: str = "wheels-v1") -> Path:
    return make_package(tmp_path / "p", fmt)


@pytest.mark.parametrize("fmt", ["wheels-v1", "adapter-wheels-v1"])
def test_wheels_dir_missing(tmp_path: Path, fmt: str) -> None:
    root = _pkg(tmp_path, fmt)
    for w in (root / "wheels").iterdir():
        w.unlink()
    (root / "wheels").rmdir()
    v = check_package(root)[1]
    assert _codes(v) == ["GR-PKG-WHEELS-MISSING"] and v[0].file == "wheels"


def test_wheels_dir_empty(tmp_path: Path) -> None:
    root = _pkg(tmp_path)
    for w in (root / "wheels").iterdir():
        w.unlink()
    v = check_package(root)[1]
    assert _codes(v) == ["GR-PKG-WHEELS-EMPTY"] and v[0].file == "wheels"


def test_wheels_dir_is_a_file(tmp_path: Path) -> None:
    root = _pkg(tmp_path)
    for w in (root / "wheels").iterdir():
        w.unlink()
    (root / "wheels").rmdir()
    (root / "wheels").write_text("x")
    assert _codes(check_package(root)[1]) == ["GR-PKG-WHEELS-MISSING"]


def test_wheels_nested_non_wheel_symlink(tmp_path: Path) -> None:
    root = _pkg(tmp_path)
    write_wheel(root / "wheels/sub", "deep-1.0-py3-none-any.whl")
    (root / "wheels/tinyparse-0.3.0.tar.gz").write_text("x")
    os.symlink(root / "wheels/pip-24.0-py3-none-any.whl", root / "wheels/alias-1.0-py3-none-any.whl")
    v = check_package(root)[1]
    got = {(x.code, x.file) for x in v}
    assert got == {
        ("GR-PKG-WHEELS-NESTED", "wheels/sub"),
        ("GR-PKG-WHEELS-NON-WHEEL", "wheels/tinyparse-0.3.0.tar.gz"),
        ("GR-PKG-WHEELS-SYMLINK", "wheels/alias-1.0-py3-none-any.whl"),
    }


def test_wheelhouse_symlink(tmp_path: Path) -> None:
    root = _pkg(tmp_path)
    (root / "wheels").rename(tmp_path / "real_wheels")
    os.symlink(tmp_path / "real_wheels", root / "wheels")
    assert _codes(check_package(root)[1]) == ["GR-PKG-WHEELS-SYMLINK"]


def test_bad_wheel_filename(tmp_path: Path) -> None:
    root = _pkg(tmp_path)
    (root / "wheels/not-a-wheel.whl").write_text("x")
    v = check_package(root)[1]
    assert _codes(v) == ["GR-PKG-WHEELS-BAD-NAME"] and v[0].file == "wheels/not-a-wheel.whl"


def test_one_version_per_normalised_name(tmp_path: Path) -> None:
    root = _pkg(tmp_path)
    write_wheel(root / "wheels", "Foo_Bar-1.0-py3-none-any.whl")
    write_wheel(root / "wheels", "foo_bar-1.1-py3-none-any.whl")
    (root / "wheels/foo.bar-1.2-py3-none-any.whl").write_bytes(
        (root / "wheels/foo_bar-1.1-py3-none-any.whl").read_bytes()
    )
    v = check_package(root)[1]
    assert _codes(v) == ["GR-PKG-WHEELS-DUPLICATE"]
    assert "foo-bar" in v[0].message and "1.0, 1.1, 1.2" in v[0].message
    assert "Foo_Bar-1.0-py3-none-any.whl" in v[0].message


def test_same_version_two_tags_is_fine(tmp_path: Path) -> None:
    root = _pkg(tmp_path)
    (root / "wheels/fastcodec-1.4.0-cp313-cp313-manylinux_2_17_x86_64.whl").write_bytes(b"x")
    (root / "wheels/fastcodec-1.4.0-cp313-cp313-manylinux_2_17_aarch64.whl").write_bytes(b"x")
    assert check_package(root)[1] == []


def test_native_v1_needs_no_wheels(tmp_path: Path) -> None:
    assert check_package(make_package(tmp_path / "n", "native-v1"))[1] == []


AMD = parse_target("linux/amd64", "3.13", "2.28")
ARM = parse_target("linux/arm64", "3.13", "2.28")


@pytest.mark.parametrize(
    "name,target,ok",
    [
        ("x-1.0-cp313-cp313-manylinux_2_17_x86_64.whl", AMD, True),
        ("x-1.0-cp313-cp313-manylinux2014_x86_64.whl", AMD, True),
        ("x-1.0-cp313-cp313-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", AMD, True),
        ("x-1.0-cp313-cp313-manylinux_2_28_x86_64.whl", AMD, True),
        ("x-1.0-cp313-cp313-manylinux_2_39_x86_64.whl", AMD, False),  # newer glibc than the target
        ("x-1.0-cp312-cp312-manylinux_2_17_x86_64.whl", AMD, False),  # cp312-only on 3.13
        ("x-1.0-cp38-abi3-manylinux_2_17_x86_64.whl", AMD, True),  # abi3 from 3.8 up
        ("x-1.0-cp314-abi3-manylinux_2_17_x86_64.whl", AMD, False),  # abi3 from 3.14: too new
        ("x-1.0-cp313-cp313t-manylinux_2_17_x86_64.whl", AMD, False),  # free-threaded build
        ("x-1.0-cp313-cp313-musllinux_1_2_x86_64.whl", AMD, False),  # musl, not glibc
        ("x-1.0-cp313-cp313-manylinux_2_17_aarch64.whl", AMD, False),  # arm64 on amd64
        ("x-1.0-cp313-cp313-manylinux_2_17_aarch64.whl", ARM, True),
        ("x-1.0-cp313-cp313-manylinux2014_aarch64.whl", ARM, True),
        ("x-1.0-cp313-cp313-manylinux_2_17_x86_64.whl", ARM, False),
        ("x-1.0-cp313-cp313-manylinux1_x86_64.whl", AMD, True),
        ("x-1.0-cp313-cp313-linux_x86_64.whl", AMD, True),
        ("x-1.0-py3-none-any.whl", AMD, True),
        ("x-1.0-py2.py3-none-any.whl", ARM, True),
        ("x-1.0-py2-none-any.whl", AMD, False),
        ("x-1.0-cp313-none-any.whl", AMD, True),
        ("x-1.0-py313-none-any.whl", AMD, True),
        ("x-1.0-cp313-cp313-win_amd64.whl", AMD, False),
        ("x-1.0-cp313-cp313-macosx_11_0_arm64.whl", ARM, False),
        ("x-1.0-pp310-pypy310_pp73-manylinux_2_17_x86_64.whl", AMD, False),
    ],
)
def test_wheel_tags_against_target(tmp_path: Path, name: str, target, ok: bool) -> None:
    root = _pkg(tmp_path)
    (root / "wheels" / name).write_bytes(b"x")
    v = check_package(root, target)[1]
    if ok:
        assert v == []
    else:
        assert _codes(v) == ["GR-PKG-WHEEL-TAG"] and v[0].file == f"wheels/{name}"
        assert "3.13" in v[0].message and target.platform in v[0].message


def test_each_bad_wheel_named_with_reason(tmp_path: Path) -> None:
    root = _pkg(tmp_path)
    (root / "wheels/a-1.0-cp312-cp312-manylinux2014_x86_64.whl").write_bytes(b"x")
    (root / "wheels/b-1.0-cp313-cp313-manylinux_2_39_x86_64.whl").write_bytes(b"x")
    (root / "wheels/c-1.0-cp313-cp313-manylinux_2_17_aarch64.whl").write_bytes(b"x")
    v = check_package(root, parse_target("linux/amd64", "3.13"))[1]
    by_file = {x.file: x.message for x in v}
    assert set(by_file) == {
        "wheels/a-1.0-cp312-cp312-manylinux2014_x86_64.whl",
        "wheels/b-1.0-cp313-cp313-manylinux_2_39_x86_64.whl",
        "wheels/c-1.0-cp313-cp313-manylinux_2_17_aarch64.whl",
    }
    assert "built for cp312-cp312, not CPython 3.13" in by_file["wheels/a-1.0-cp312-cp312-manylinux2014_x86_64.whl"]
    assert (
        "needs glibc 2.39, the target has glibc 2.36" in by_file["wheels/b-1.0-cp313-cp313-manylinux_2_39_x86_64.whl"]
    )
    assert "another platform (manylinux_2_17_aarch64)" in by_file["wheels/c-1.0-cp313-cp313-manylinux_2_17_aarch64.whl"]


def test_musl_reason(tmp_path: Path) -> None:
    root = _pkg(tmp_path)
    (root / "wheels/m-1.0-cp313-cp313-musllinux_1_2_x86_64.whl").write_bytes(b"x")
    v = check_package(root, parse_target("linux/amd64", "3.13"))[1]
    assert "musl" in v[0].message


@pytest.mark.parametrize(
    "platform,python,glibc",
    [
        ("linux/riscv", "3.13", None),
        ("linux/amd64", "three", None),
        ("linux/amd64", "3", None),
        ("linux/amd64", "3.13", "x"),
        ("linux/amd64", "2.7", None),
        ("linux/amd64", "3.13", "1.9"),
    ],
)
def test_parse_target_rejects(platform: str, python: str, glibc: str | None) -> None:
    with pytest.raises(ValueError):
        parse_target(platform, python, glibc)


def test_target_does_not_depend_on_host_interpreter() -> None:
    t = parse_target("linux/arm64", "3.12")
    tags = {str(x) for x in t.supported_tags()}
    assert "cp312-cp312-manylinux_2_17_aarch64" in tags and "cp312-abi3-manylinux2014_aarch64" in tags
    assert not any("x86_64" in x or "cp311" in x.split("-")[1] for x in tags)
