"""A server's ``overrides.txt`` (NeMo Gym 0.7.0 ``setup_env_command``: ``uv pip install --override
overrides.txt -r requirements.txt``): the closure proof, stage 1 and stage 2 resolve under it, the
plan shows it, the venv digest covers it, a rebuild names its changed line, a bad line is a
preflight error naming the file and the line, errors on an overridden distribution point at it,
``vendor`` resolves the closure under it, and beside a ``pyproject.toml`` it is not applied (as
Gym's launcher does not).

The package is modelled on the 0.7.0 trees ``wmt_translation`` / ``longmt_eval`` (a dependency
declares ``protobuf<5.0.0``, another needs ``protobuf>=5``: the override forces the newer one) and
``osworld_agent`` (``agp-client; sys_platform == 'never'`` drops a dependency published nowhere).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gym_runtime.cli.main import main
from gym_runtime.errors import BuildError
from gym_runtime.package import parse_target
from gym_runtime.venvs import build_venvs, plan_venvs
from gym_runtime.venvs.vendor import vendor
from tests.helpers.index import SimpleIndex, write_simple_index
from tests.helpers.wheels import build_wheel
from tests.venvs.conftest import merged_config, synthetic_pkg

OVERRIDES = """\
# cometlike declares protolike<5.0.0, but wandblike needs protolike>=5: force the newer one
protolike==6.0.0

# published on no index this package uses; the server never imports it
agplike; sys_platform == 'never'
"""
SERVER = "resources_servers/acme_mt"


def _closure_wheels(out: Path) -> list[Path]:
    return [
        build_wheel(out, "cometlike", "1.0.0", requires=["protolike<5.0.0", "agplike>=1"]),
        build_wheel(out, "wandblike", "2.0.0", requires=["protolike>=5"]),
        build_wheel(out, "protolike", "6.0.0"),
    ]


def _pkg(
    tmp_path: Path,
    *,
    wheels: list[Path] | None,
    overrides: str | None = OVERRIDES,
    requirements: str = "cometlike==1.0.0\nwandblike==2.0.0\n",
) -> Path:
    pkg = synthetic_pkg(tmp_path / "pkg", {"acme_mt": ("resources_servers", requirements)}, wheels=wheels)
    if overrides is not None:
        (pkg / SERVER / "overrides.txt").write_text(overrides)
    return pkg


def _version(python: Path, module: str) -> str:
    return subprocess.run(
        [str(python), "-c", f"import {module}; print({module}.__version__)"], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_wheels_package_builds_under_its_overrides_in_every_step(tmp_path: Path, make_settings) -> None:
    pkg = _pkg(tmp_path, wheels=_closure_wheels(tmp_path / "w"))
    settings = make_settings(pin_mode="none")  # stage 1 against an empty index: wheels/ must do
    plan = plan_venvs(merged_config(pkg), settings)
    vp = plan.for_instance("acme_mt")
    assert vp.stage2 and vp.rel_overrides == f"{SERVER}/overrides.txt"
    assert vp.to_dict()["overrides_file"] == f"{SERVER}/overrides.txt"
    assert (
        "overrides (overrides.txt, every requirement on these distributions): protolike==6.0.0, "
        "agplike; sys_platform == 'never'"
    ) in vp.notes
    v = build_venvs(plan, settings).for_instance("acme_mt")
    assert _version(v.python, "protolike") == "6.0.0"
    assert not list(v.path.rglob("agplike")), "the override dropped agplike"
    inputs = v.path / ".gym-runtime"
    assert (inputs / "overrides.txt").read_text().splitlines()[1] == "protolike==6.0.0"  # line 2 stays line 2
    logs = settings.logs_dir / "build"
    for step in ("closure", "stage1", "stage2"):
        (log,) = logs.glob(f"acme_mt-*.{step}.log")
        assert "--overrides" in log.read_text(), step


def test_without_the_overrides_the_closure_proof_fails(tmp_path: Path, make_settings) -> None:
    pkg = _pkg(tmp_path, wheels=_closure_wheels(tmp_path / "w"), overrides=None)
    settings = make_settings(pin_mode="none")
    with pytest.raises(BuildError) as ei:
        build_venvs(plan_venvs(merged_config(pkg), settings), settings)
    assert ei.value.code == "GR-BUILD-CLOSURE" and ei.value.extra["stage"] == "stage2"


def test_the_digest_covers_the_overrides_and_a_rebuild_names_the_line(tmp_path: Path, make_settings) -> None:
    files = tmp_path / "files"
    _closure_wheels(files)
    build_wheel(files, "protolike", "6.1.0")
    build_wheel(files, "agplike", "1.0.0")
    pkg = _pkg(tmp_path, wheels=None)  # native-v1: stage 1 only, from the index
    settings = make_settings(write_simple_index(files, tmp_path / "idx"), pin_mode="none")
    first = build_venvs(plan_venvs(merged_config(pkg), settings), settings).for_instance("acme_mt")
    assert _version(first.python, "protolike") == "6.0.0"
    # a comment changes nothing uv is given: same venv
    (pkg / SERVER / "overrides.txt").write_text("# moved\n" + OVERRIDES)
    assert plan_venvs(merged_config(pkg), settings).for_instance("acme_mt").digest == first.digest
    (pkg / SERVER / "overrides.txt").write_text(OVERRIDES.replace("protolike==6.0.0", "protolike==6.1.0"))
    second = build_venvs(plan_venvs(merged_config(pkg), settings), settings).for_instance("acme_mt")
    assert second.digest != first.digest and _version(second.python, "protolike") == "6.1.0"
    assert f"{SERVER}/overrides.txt: `protolike==6.0.0` -> `protolike==6.1.0`" in second.reasons
    # no overrides.txt at all: the plan has none and its digest is the one it had before the file existed
    (pkg / SERVER / "overrides.txt").unlink()
    bare = plan_venvs(merged_config(pkg), settings).for_instance("acme_mt")
    assert (
        bare.overrides is None and "overrides" not in bare.inputs and bare.digest not in (first.digest, second.digest)
    )


def test_an_override_beats_an_injected_pin_and_the_plan_says_so(tmp_path: Path, make_settings) -> None:
    files = tmp_path / "files"
    for n, v in (("nemo-gym", "0.4.0"), ("ray", "2.60.0"), ("openai", "2.7.2"), ("openai", "2.8.0")):
        build_wheel(files, n, v)
    pkg = _pkg(
        tmp_path,
        wheels=None,
        requirements="-e nemo-gym[dev] @ ../../\n",
        overrides="# match the SDK's own pin\nopenai==2.8.0\n",
    )
    settings = make_settings(write_simple_index(files, tmp_path / "idx"))
    plan = plan_venvs(merged_config(pkg), settings)
    vp = plan.for_instance("acme_mt")
    assert (
        "overrides.txt line 2: `openai==2.8.0` overrides the injected pin openai==2.7.2 "
        "(added by gym-runtime: set by the test (openai))"
    ) in vp.notes
    v = build_venvs(plan, settings).for_instance("acme_mt")
    assert _version(v.python, "openai") == "2.8.0"  # uv's rule, and Gym's launcher gets the same


def test_an_override_that_exists_nowhere_is_named_with_its_line(tmp_path: Path, make_settings) -> None:
    files = tmp_path / "files"
    _closure_wheels(files)
    pkg = _pkg(tmp_path, wheels=None, overrides="protolike==99.0\n")
    with SimpleIndex(files) as idx:
        settings = make_settings(idx.url, pin_mode="none")
        with pytest.raises(BuildError) as ei:
            build_venvs(plan_venvs(merged_config(pkg), settings), settings)
    e = ei.value
    assert e.code == "GR-BUILD-MISSING" and e.extra["stage"] == "stage1", (e.code, e.message)
    assert f"({SERVER}/requirements.txt, {SERVER}/overrides.txt)" in e.message
    assert f"({SERVER}/overrides.txt line 1: `protolike==99.0`, an override)" in e.message
    assert e.hint == f"check the spelling and version of protolike in {SERVER}/overrides.txt"


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("-r more.txt", "includes another file"),
        ("--index-url http://127.0.0.1:1/simple", "is an option line"),
        ("./vendored/protolike", "is a local path"),
        ("protolike >>= 6", "is not a valid requirement"),
    ],
)
def test_a_bad_line_is_a_preflight_error_naming_file_and_line(
    tmp_path: Path, capsys, make_settings, line: str, why: str
) -> None:
    pkg = _pkg(tmp_path, wheels=None, overrides=f"# forced versions\nprotolike==6.0.0\n{line}\n")
    code = main(["validate", str(pkg), "--json"])
    out = capsys.readouterr().out
    doc = json.loads(out[: out.rindex("}") + 1])
    assert code == 1
    (v,) = doc["error"]["violations"]
    assert (v["code"], v["file"], v["key"]) == ("GR-BUILD-OVERRIDE", f"{SERVER}/overrides.txt", "line 3")
    assert f"`{line}` {why}" in v["message"]
    with pytest.raises(BuildError) as ei:  # build stops on the same problem before any install
        plan_venvs(merged_config(pkg), make_settings())
    assert (ei.value.code, ei.value.extra["file"], ei.value.extra["key"]) == (
        "GR-BUILD-OVERRIDE",
        f"{SERVER}/overrides.txt",
        "line 3",
    )


def test_a_url_override_of_an_offline_venv_needs_the_network(tmp_path: Path, make_settings) -> None:
    pkg = _pkg(
        tmp_path,
        wheels=_closure_wheels(tmp_path / "w"),
        overrides="protolike @ https://files.example.invalid/protolike-6.0.0-py3-none-any.whl\n",
    )
    with pytest.raises(BuildError) as ei:
        plan_venvs(merged_config(pkg), make_settings())
    assert (ei.value.code, ei.value.extra["key"]) == ("GR-BUILD-NEEDS-NETWORK", "line 1")
    assert ei.value.hint == "override protolike by version (`protolike==X`) and vendor that wheel into wheels/"


def test_beside_a_pyproject_it_is_not_applied_and_the_plan_says_why(tmp_path: Path, make_settings) -> None:
    pkg = _pkg(tmp_path, wheels=None, overrides=None)
    srv = pkg / SERVER
    (srv / "requirements.txt").unlink()
    (srv / "pyproject.toml").write_text(
        '[project]\nname = "acme-mt"\nversion = "0"\ndependencies = ["cometlike==1.0.0"]\n'
    )
    before = plan_venvs(merged_config(pkg), make_settings()).for_instance("acme_mt")
    (srv / "overrides.txt").write_text(OVERRIDES)
    vp = plan_venvs(merged_config(pkg), make_settings()).for_instance("acme_mt")
    assert vp.overrides is None and vp.digest == before.digest
    assert (
        f"{SERVER}/overrides.txt is not applied: overrides are read beside requirements.txt only (as Gym's "
        "launcher does); to apply them, list the server's dependencies in requirements.txt instead of "
        "pyproject.toml"
    ) in vp.notes


def test_vendor_resolves_the_closure_under_the_overrides(tmp_path: Path, make_settings) -> None:
    files = tmp_path / "files"
    _closure_wheels(files)
    build_wheel(files, "protolike", "4.9.0")
    build_wheel(files, "pip", "25.0")
    pkg = _pkg(tmp_path, wheels=[build_wheel(tmp_path / "old", "stale", "1.0")])
    with SimpleIndex(files) as idx:
        done = vendor(merged_config(pkg), make_settings(idx.url, pin_mode="none"), parse_target("linux/amd64", "3.13"))
    assert {(d.name, d.version) for d in done} == {
        ("cometlike", "1.0.0"),
        ("wandblike", "2.0.0"),
        ("protolike", "6.0.0"),
        ("pip", "25.0"),
    }
