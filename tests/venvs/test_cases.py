"""Install cases from the case inputs under tests/cases/data (C01, C07-C12, C15-C18), each from the case's own files."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from gym_runtime.errors import BuildError
from gym_runtime.venvs import build_venvs, plan_venvs
from gym_runtime.venvs.maintenance import prune_cache
from gym_runtime.venvs.store import read_marker
from tests.helpers.cases import CASES
from tests.helpers.index import SimpleIndex, write_simple_index
from tests.helpers.wheels import (
    build_backend_wheel,
    build_sdist,
    build_wheel,
    materialise_listing,
    parse_listing,
    sha256_file,
)
from tests.venvs.conftest import case_pkg, merged_config, synthetic_pkg


def _pins(case: str) -> dict[str, str]:
    out = {}
    for line in (CASES / case / "daemon_injected_pins.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            out[name] = version
    return out


def _ready(settings) -> list[Path]:
    return [d for d in settings.venv_dir.iterdir() if read_marker(d)] if settings.venv_dir.is_dir() else []


def test_c01_failed_build_leaves_nothing_ready_and_run2_rebuilds(tmp_path, make_settings) -> None:
    files = tmp_path / "files"
    build_wheel(files, "fastapi", "0.110.0")
    build_wheel(files, "sympy", "1.13.3")
    srv = "resources_servers/acme_math"
    pkg = case_pkg(
        "C01", tmp_path / "pkg", requirements={srv: (CASES / "C01" / srv / "requirements.run1.txt").read_text()}
    )
    settings = make_settings(write_simple_index(files, tmp_path / "idx"))
    with pytest.raises(BuildError) as ei:
        build_venvs(plan_venvs(merged_config(pkg), settings), settings)
    e = ei.value
    assert e.code == "GR-BUILD-MISSING" and e.extra["server"] == "acme_math" and e.extra["stage"] == "stage1"
    assert "resources_servers/acme_math/requirements.txt" in e.message and "sympyy" in e.message
    assert "line 3" in e.message  # the comment line counts: sympyy is on line 3 of the file
    assert Path(e.log).is_file() and "sympyy" in Path(e.log).read_text()
    assert _ready(settings) == [] and not list((settings.venv_dir / ".tmp").iterdir())
    (pkg / srv / "requirements.txt").write_text((CASES / "C01" / srv / "requirements.run2.txt").read_text())
    v = build_venvs(plan_venvs(merged_config(pkg), settings), settings).for_instance("acme_math")
    assert not v.reused and read_marker(v.path)["installed"]["sympy"] == "1.13.3"


def test_c07_injected_pin_conflict_names_pin_origin_and_chain(tmp_path, make_settings) -> None:
    files = tmp_path / "files"
    materialise_listing(CASES / "C07" / "wheels_listing.txt", files)
    pkg = case_pkg("C07", tmp_path / "pkg", fmt="native-v1")
    settings = make_settings(write_simple_index(files, tmp_path / "idx"), pins=_pins("C07"))
    plan = plan_venvs(merged_config(pkg), settings)
    vp = plan.for_instance("acme_swe_agent")
    assert vp.pins[0].as_constraint and "added by gym-runtime" in vp.pins[0].origin
    with pytest.raises(BuildError) as ei:
        build_venvs(plan, settings)
    e = ei.value
    assert e.code == "GR-BUILD-PIN-CONFLICT" and e.extra["server"] == "acme_swe_agent"
    assert "injected pin oaiclient==2.44.0" in e.message and "added by gym-runtime" in e.message
    assert "acme-gym-core -> oaiclient<=2.7.2" in e.message and "requirements.txt line 1" in e.message
    assert "GYM_RUNTIME_PIN_MODE=none" in e.hint
    assert "depend on oaiclient<=2.7.2" in e.cause  # uv's own words kept in full
    constraints = Path(e.log).read_text()
    assert "gym-runtime-constraints.txt" in constraints and "oaiclient==2.44.0" in constraints


def test_c08_inherited_uv_python_cannot_redirect_the_install(tmp_path, make_settings) -> None:
    wheels = materialise_listing(CASES / "C08" / "wheels_listing.txt", tmp_path / "w")
    pkg = case_pkg("C08", tmp_path / "pkg", wheels=wheels)
    foreign = tmp_path / "foreign"
    subprocess.run([shutil.which("python3") or "python3", "-m", "venv", "--without-pip", str(foreign)], check=True)
    env = {}
    for line in (CASES / "C08" / "daemon_env.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            k, v = line.split("=", 1)
            env[k] = v
    env["UV_PYTHON"] = str(foreign / "bin" / "python")  # a harmless throw-away interpreter
    env["PIP_FIND_LINKS"] = str(tmp_path / "elsewhere")
    settings = make_settings(env=env)
    v = build_venvs(plan_venvs(merged_config(pkg), settings), settings).for_instance("acme_math")
    out = subprocess.run(
        [str(v.python), "-c", "import gymtools; print(gymtools.__file__)"], capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith(str(v.path))
    assert not list(foreign.rglob("gymtools*")), "the foreign interpreter must stay unchanged"
    log = next((settings.logs_dir / "build").glob("acme_math-*.venv.log")).read_text()
    removed = log.split("removed from the inherited environment:")[1].splitlines()[0]
    for var in (
        "UV_PYTHON",
        "UV_SYSTEM_PYTHON",
        "VIRTUAL_ENV",
        "UV_PROJECT_ENVIRONMENT",
        "PIP_REQUIRE_VIRTUALENV",
        "PIP_FIND_LINKS",
    ):
        assert var in removed
    assert "honoured uv settings: UV_INDEX_URL=" in log
    stage2 = next((settings.logs_dir / "build").glob("acme_math-*.stage2.log")).read_text()
    assert "--no-index --offline --no-config" in stage2


@pytest.mark.parametrize("variant", ["a", "b"])
def test_c09_pin_only_in_wheels(tmp_path, make_settings, variant) -> None:
    files = tmp_path / "files"
    materialise_listing(CASES / "C09" / "index_listing.txt", files)
    build_wheel(files, "fastapi", "0.110.0")
    entries = parse_listing(CASES / "C09" / "wheels_listing.txt")
    # wheels/ holds the whole closure (the server's fastapi too); (b) lacks only the pinned fork
    wheels = [build_wheel(tmp_path / "w", "fastapi", "0.110.0")]
    if variant == "a":
        wheels += materialise_listing(CASES / "C09" / "wheels_listing.txt", tmp_path / "w")
    assert entries[0].filename == "acme_gym-0.5.0rc0-py3-none-any.whl"
    pkg = case_pkg("C09", tmp_path / "pkg", wheels=wheels)
    with SimpleIndex(files) as idx:
        settings = make_settings(idx.url, pin_mode="gym", pins=_pins("C09"))
        plan = plan_venvs(merged_config(pkg), settings)
        if variant == "a":
            v = build_venvs(plan, settings).for_instance("acme_math")
            assert read_marker(v.path)["installed"]["acme-gym"] == "0.5.0rc0"
            return
        with pytest.raises(BuildError) as ei:
            build_venvs(plan, settings)
    e = ei.value
    assert e.code == "GR-BUILD-PIN-MISSING" and e.extra["server"] == "acme_math"
    assert "acme-gym==0.5.0rc0" in e.message and "added by gym-runtime" in e.message
    assert "versions on the index: 0.5.0, 0.5.1" in e.message and "in wheels/: none" in e.message
    assert "acme_gym-0.5.0rc0" in e.hint and "never relaxes" in e.hint


def test_c10_sdist_without_backend_fails_before_the_offline_stage(tmp_path, make_settings) -> None:
    pyproject = (CASES / "C10" / "sdist_contents" / "tinyparse-0.3.0" / "pyproject.toml").read_text()
    assert parse_listing(CASES / "C10" / "wheels_listing.txt")[0].filename == "tinyparse-0.3.0.tar.gz"
    sdist = build_sdist(tmp_path / "w", "tinyparse", "0.3.0", pyproject=pyproject)
    pkg = case_pkg("C10", tmp_path / "pkg", wheels=[sdist])
    settings = make_settings()
    with pytest.raises(BuildError) as ei:
        plan_venvs(merged_config(pkg), settings)
    e = ei.value
    assert e.code == "GR-BUILD-SDIST-BACKEND" and e.extra["server"] == "acme_parse"
    assert "wheels/tinyparse-0.3.0.tar.gz is a source distribution" in e.message
    assert "setuptools>=61, which is not in wheels/" in e.message and "ship a wheel for tinyparse" in e.hint
    assert not settings.venv_dir.joinpath(".tmp").exists()  # nothing was started

    # variant b: an editable local path with a setuptools backend
    srv = pkg / "resources_servers" / "acme_parse"
    shutil.copytree(CASES / "C10" / "variant_b" / "shared_utils", srv / "shared_utils")
    shutil.copy(CASES / "C10" / "variant_b" / "requirements.txt", srv / "requirements.txt")
    (pkg / "wheels" / sdist.name).unlink()
    build_wheel(pkg / "wheels", "tinyparse", "0.3.0")
    with pytest.raises(BuildError) as ei:
        plan_venvs(merged_config(pkg), settings)
    assert "`-e ./shared_utils` (requirements.txt line 2) is a local project" in ei.value.message
    assert "setuptools, which is not in wheels/" in ei.value.message


def test_c10_sdist_with_its_backend_in_wheels_builds_offline(tmp_path, make_settings) -> None:
    wheels = [build_sdist(tmp_path / "w", "tinyparse", "0.3.0"), build_backend_wheel(tmp_path / "w")]
    pkg = case_pkg("C10", tmp_path / "pkg", wheels=wheels)
    settings = make_settings()  # the index is empty: everything comes from wheels/
    v = build_venvs(plan_venvs(merged_config(pkg), settings), settings).for_instance("acme_parse")
    assert read_marker(v.path)["installed"]["tinyparse"] == "0.3.0"


def test_c11_url_and_git_lines_are_refused_before_building(tmp_path, make_settings) -> None:
    wheels = materialise_listing(CASES / "C11" / "wheels_listing.txt", tmp_path / "w")
    pkg = case_pkg("C11", tmp_path / "pkg", wheels=wheels)
    with pytest.raises(BuildError) as ei:
        plan_venvs(merged_config(pkg), make_settings())
    e = ei.value
    assert e.code == "GR-BUILD-PREFLIGHT" and len(e.violations) == 2
    # the hint reads right as the block's last line and in --json (where nothing is "above")
    assert e.hint == "fix each problem (`gym-runtime validate PKG` lists them all without building), then run again"
    first, second = e.violations
    assert first.code == second.code == "GR-BUILD-NEEDS-NETWORK"
    assert first.key == "line 1" and "git+https://git.example.invalid" in first.message
    assert first.hint == "wheels/ has httpx_lite-0.2.0-py3-none-any.whl: use `httpx-lite==0.2.0`"
    assert second.key == "line 2" and "use `judge-sdk==1.0.0`" in second.hint
    assert all(v.file == "resources_servers/acme_web/requirements.txt" for v in e.violations)


def test_c12_wrong_abi_and_too_new_manylinux(tmp_path, make_settings) -> None:
    wheels = materialise_listing(CASES / "C12" / "wheels_listing.txt", tmp_path / "w")
    files = tmp_path / "files"
    materialise_listing(CASES / "C12" / "index_listing.txt", files)
    pkg = case_pkg("C12", tmp_path / "pkg", wheels=wheels)
    settings = make_settings(write_simple_index(files, tmp_path / "idx"))
    plan = plan_venvs(merged_config(pkg), settings)
    vp = plan.for_instance("acme_codec")
    assert vp.python.version.startswith("3.13.") and "configs/acme_codec.yaml" in vp.python_origin
    with pytest.raises(BuildError) as ei:
        build_venvs(plan, settings)
    e = ei.value
    assert e.code == "GR-BUILD-WHEEL-TAGS" and e.extra["stage"] == "stage2" and e.extra["step"] == "closure check"
    assert "cp313" in e.message
    assert "fastcodec-1.4.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl: Python/ABI tag" in e.message
    assert "fastcodec-1.5.0-cp313-cp313-manylinux_2_39_x86_64.whl: platform tag mismatch" in e.message
    # the host's highest manylinux tag, from its glibc (not packaging's plain linux_<arch> tag), as uv says it
    glibc = os.confstr("CS_GNU_LIBC_VERSION").split()[1].split(".")
    highest = f"manylinux_{glibc[0]}_{glibc[1]}_{platform.machine()}"
    assert f"up to {highest}" in e.message and f"supports up to {highest};" in e.message
    assert highest in e.cause
    assert "hint:" in e.cause  # uv's full cause and hint lines
    # stage 2's closure proof runs before stage 1, so the index's 1.3.0 never quietly replaces wheels/
    assert not list((settings.logs_dir / "build").glob("*.stage1.log"))


def test_c15_yanked_dependency(tmp_path, make_settings) -> None:
    files = tmp_path / "files"
    yanked = {}
    for entry in parse_listing(CASES / "C15" / "index_listing.txt"):
        requires = ["futurelib==3.1.1"] if entry.name == "legacy-client" else []
        build_wheel(files, entry.name, entry.version, requires=requires)
        if entry.yanked:
            yanked[entry.filename] = entry.yanked
    srv = "resources_servers/acme_legacy"
    with SimpleIndex(files, yanked=yanked) as idx:
        pkg = case_pkg("C15", tmp_path / "a", fmt="native-v1")  # variant (a): wheels/ empty
        settings = make_settings(idx.url)
        with pytest.raises(BuildError) as ei:
            build_venvs(plan_venvs(merged_config(pkg), settings), settings)
        e = ei.value
        assert e.code == "GR-BUILD-YANKED" and e.extra["server"] == "acme_legacy"
        assert "pin futurelib==3.1.1 explicitly in" in e.hint and "ship it in wheels/" in e.hint
        assert "was yanked (reason: declares wrong python support)" in e.cause
        # the explicit pin: builds, and the yank warning is kept
        (pkg / srv / "requirements.txt").write_text((CASES / "C15" / "requirements.fixed.txt").read_text())
        v = build_venvs(plan_venvs(merged_config(pkg), settings), settings).for_instance("acme_legacy")
        assert any("futurelib==3.1.1` is yanked" in w for w in v.warnings)
        # variant (b): wheels/ carries the file: both stages agree (success)
        wheels = materialise_listing(CASES / "C15" / "wheels_listing.txt", tmp_path / "w")
        wheels.append(build_wheel(tmp_path / "w", "legacy-client", "5.0.1", requires=["futurelib==3.1.1"]))
        pkg_b = case_pkg("C15", tmp_path / "b", wheels=wheels)
        vb = build_venvs(plan_venvs(merged_config(pkg_b), settings), settings).for_instance("acme_legacy")
        assert read_marker(vb.path)["installed"]["futurelib"] == "3.1.1"


def _c16_package(tmp_path: Path) -> Path:
    wheels = materialise_listing(CASES / "C16" / "wheels_listing.txt", tmp_path / "w")
    by = {w.name.split("-")[0]: w for w in wheels}
    text = (CASES / "C16" / "resources_servers" / "acme_parse" / "requirements.txt").read_text()
    text = text.replace("<WHEEL_SHA256>", sha256_file(by["tinyparse"]))
    text = text.replace("<JUDGEKIT_SHA256>", sha256_file(by["judgekit"]))
    return case_pkg("C16", tmp_path / "pkg", wheels=wheels, requirements={"resources_servers/acme_parse": text})


def test_c16_hash_mode_hashes_injected_pins_and_names_missing_and_mismatched(tmp_path, make_settings) -> None:
    pkg = _c16_package(tmp_path)
    settings = make_settings(pin_mode="gym", pins=_pins("C16"))
    plan = plan_venvs(merged_config(pkg), settings)
    assert plan.for_instance("acme_parse").hash_mode
    v = build_venvs(plan, settings).for_instance("acme_parse")
    pins = (v.path / ".gym-runtime" / "gym-runtime-pins.txt").read_text()
    oai = next((pkg / "wheels").glob("oaiclient-*.whl"))
    assert f"oaiclient==2.7.2 --hash=sha256:{sha256_file(oai)}" in pins
    stage1 = next((settings.logs_dir / "build").glob("acme_parse-*.stage1.log")).read_text()
    assert "--require-hashes" in stage1

    # no pins: judgekit's transitive oaiclient has no hash anywhere -> error with the sha256 to paste
    bare = make_settings(pin_mode="none", pins={})
    with pytest.raises(BuildError) as ei:
        build_venvs(plan_venvs(merged_config(pkg), bare), bare)
    assert ei.value.code == "GR-BUILD-HASH" and "oaiclient (a transitive dependency) has none" in ei.value.message
    assert f"oaiclient==2.7.2 --hash=sha256:{sha256_file(oai)}" in ei.value.hint

    # run 2: tinyparse rebuilt with the same name -> hash mismatch naming file and line
    build_wheel(pkg / "wheels", "tinyparse", "0.3.0", salt="rebuilt")
    with pytest.raises(BuildError) as ei:
        plan_venvs(merged_config(pkg), settings)  # found before uv runs (uv's cache can hide it)
    e = ei.value
    assert e.code == "GR-BUILD-HASH" and e.extra["server"] == "acme_parse"
    assert "wheels/tinyparse-0.3.0-py3-none-any.whl (computed sha256:" in e.message
    assert "requirements.txt line 2 (expected sha256:" in e.message


def test_c16_hash_mode_refuses_a_pin_it_cannot_hash(tmp_path, make_settings) -> None:
    pkg = _c16_package(tmp_path)
    with pytest.raises(BuildError) as ei:
        plan_venvs(merged_config(pkg), make_settings(pin_mode="gym"))  # nemo-gym etc. are not in wheels/
    assert "GR-BUILD-HASH-PIN" in {v.code for v in ei.value.violations} | {ei.value.code}


def test_c17_missing_python_fails_before_any_install(tmp_path, make_settings) -> None:
    pkg = case_pkg("C17", tmp_path / "pkg")
    settings = make_settings()
    with pytest.raises(BuildError) as ei:
        plan_venvs(merged_config(pkg), settings)
    e = ei.value
    assert e.code == "GR-BUILD-PYTHON" and e.message.startswith("acme_math: python 3.14")
    assert "configs/acme_math.yaml" in e.message and "not available on this host" in e.message
    for listed in (CASES / "C17" / "host_pythons.txt").read_text().split():
        version = listed.rsplit("python", 1)[1]  # 3.11, 3.12, 3.13
        assert f" {version}." in e.message or f"found {version}." in e.message
    assert "never downloads" in e.hint and not settings.venv_dir.exists()


def test_c18_parallel_builds_share_the_cache_and_maintenance_waits(tmp_path, make_settings) -> None:
    # the case's sdist + backend (tinybackend stands in for setuptools, which would need PyPI)
    req = (CASES / "C18" / "requirements_each_server.txt").read_text()
    wheels = [build_sdist(tmp_path / "w", "tinyparse", "0.3.0"), build_backend_wheel(tmp_path / "w")]
    wheels += [build_wheel(tmp_path / "w", f"extra{i}", "1.0") for i in range(1, 7)]
    # as given: six servers with one requirements set -> one shared venv, every server has it
    same = case_pkg(
        "C18",
        tmp_path / "same",
        wheels=wheels[:2],
        requirements={f"resources_servers/srv{i}": req for i in range(1, 7)},
    )
    settings = make_settings()
    venvs = build_venvs(plan_venvs(merged_config(same), settings), settings)
    assert venvs.built == 1 and all(venvs.for_instance(f"srv{i}").path.is_dir() for i in range(1, 7))
    # six distinct venvs in parallel, one cache, maintenance triggered while they run
    diff = synthetic_pkg(
        tmp_path / "diff", {f"srv{i}": ("resources_servers", f"{req}extra{i}\n") for i in range(1, 7)}, wheels=wheels
    )
    plan = plan_venvs(merged_config(diff), settings)
    assert len(plan.venvs) == 6
    finished: dict[str, float] = {}

    def maintenance() -> None:
        time.sleep(0.3)
        assert prune_cache(settings)
        finished["prune"] = time.monotonic()

    t = threading.Thread(target=maintenance)
    t.start()
    venvs = build_venvs(plan, settings, max_workers=6)
    finished["builds"] = time.monotonic()
    t.join(60)
    assert venvs.built == 6 and finished["prune"] >= finished["builds"] - 0.5
