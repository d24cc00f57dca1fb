"""Both stages against a real loopback index, reuse by digest, dedupe, the lock, and rebuild triggers."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest

from gym_runtime.errors import BuildError
from gym_runtime.ray.workers import RAY_HOOK
from gym_runtime.venvs import build_venvs, plan_venvs
from gym_runtime.venvs.store import MARKER
from tests.helpers.index import SimpleIndex
from tests.helpers.wheels import build_wheel
from tests.venvs.conftest import merged_config, synthetic_pkg


def _run(python: Path, code: str) -> str:
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def index_files(tmp_path: Path) -> Path:
    d = tmp_path / "index-files"
    build_wheel(d, "judgekit", "1.0.0", requires=["tinyparse>=0.3"])
    build_wheel(d, "tinyparse", "0.3.0")
    build_wheel(d, "tinyparse", "0.4.0")
    return d


def test_two_stages_http_index_then_reuse(tmp_path: Path, index_files: Path, make_settings) -> None:
    wheels = [
        build_wheel(tmp_path / "w", "acme-env", "1.2.0", requires=["tinyparse==0.3.0"]),
        build_wheel(tmp_path / "w", "tinyparse", "0.3.0"),  # wheels/ holds the whole closure
        build_wheel(tmp_path / "w", "judgekit", "1.0.0", requires=["tinyparse>=0.3"]),
    ]
    pkg = synthetic_pkg(
        tmp_path / "pkg",
        {"acme_math": ("resources_servers", "judgekit==1.0.0\n"), "policy": ("responses_api_models", "# nothing\n")},
        wheels=wheels,
    )
    with SimpleIndex(index_files) as idx:
        settings = make_settings(idx.url)
        plan = plan_venvs(merged_config(pkg), settings)
        res = plan.for_instance("acme_math")
        assert res.stage2 and res.closure == ("acme-env==1.2.0", "judgekit==1.0.0", "tinyparse==0.3.0")
        assert not plan.for_instance("policy").stage2  # models get no stage 2
        venvs = build_venvs(plan, settings)
        v = venvs.for_instance("acme_math")
        assert not v.reused and v.python == v.path / "bin" / "python"
        assert _run(v.python, "import judgekit, tinyparse, acme_env; print(tinyparse.__version__)") == "0.3.0"
        marker = json.loads((v.path / MARKER).read_text())
        assert marker["digest"] == v.digest and marker["installed"]["acme-env"] == "1.2.0"
        # stage 1 took tinyparse 0.4.0 from the index; the closure pinned 0.3.0: reported
        assert any("replaced tinyparse 0.4.0" in w for w in v.warnings), v.warnings
        assert any(p.startswith("/simple/judgekit") for p in idx.requests)
        n_requests = len(idx.requests)
        again = build_venvs(plan_venvs(merged_config(pkg), settings), settings)
        assert again.for_instance("acme_math").reused and again.built == 0
        assert len(idx.requests) == n_requests, "a reused venv must not touch the index"


def test_twenty_servers_one_requirements_set_share_one_venv(
    tmp_path: Path, index_files: Path, make_settings, empty_index: str
) -> None:
    from tests.helpers.index import write_simple_index

    servers = {f"srv{i}": ("resources_servers", "tinyparse==0.3.0\n") for i in range(20)}
    pkg = synthetic_pkg(tmp_path / "pkg", servers)
    settings = make_settings(write_simple_index(index_files, tmp_path / "idx"))
    plan = plan_venvs(merged_config(pkg), settings)
    assert len(plan.venvs) == 1 and len(plan.venvs[0].instances) == 20
    venvs = build_venvs(plan, settings)
    assert venvs.built == 1
    assert len({venvs.for_instance(f"srv{i}").path for i in range(20)}) == 1


def test_changed_inputs_rebuild_and_wheel_rebuilt_same_version(tmp_path: Path, make_settings) -> None:
    w = build_wheel(tmp_path / "w", "acme-env", "1.0.0")
    pkg = synthetic_pkg(tmp_path / "pkg", {"acme": ("resources_servers", "acme-env\n")}, wheels=[w])
    settings = make_settings()
    first = build_venvs(plan_venvs(merged_config(pkg), settings), settings).for_instance("acme")
    # same name and version, new bytes: the digest changes, the venv is rebuilt
    build_wheel(pkg / "wheels", "acme-env", "1.0.0", salt="rebuilt")
    second = build_venvs(plan_venvs(merged_config(pkg), settings), settings).for_instance("acme")
    assert second.digest != first.digest and not second.reused
    assert "rebuilt" in next(second.path.rglob("acme_env/__init__.py")).read_text(), "uv must not serve old bytes"
    # a comment in requirements.txt changes the rendered file -> rebuild too
    (pkg / "resources_servers/acme/requirements.txt").write_text("acme-env  # now with a comment\n")
    third = plan_venvs(merged_config(pkg), settings).for_instance("acme")
    assert third.digest == second.digest  # comments are stripped: same install, same venv
    (pkg / "resources_servers/acme/requirements.txt").write_text("acme-env==1.0.0\n")
    assert plan_venvs(merged_config(pkg), settings).for_instance("acme").digest != second.digest


def test_two_builders_at_once_share_the_lock(tmp_path: Path, index_files: Path, make_settings) -> None:
    from tests.helpers.index import write_simple_index

    pkg = synthetic_pkg(tmp_path / "pkg", {"acme": ("resources_servers", "judgekit\n")})
    settings = make_settings(write_simple_index(index_files, tmp_path / "idx"))
    plan = plan_venvs(merged_config(pkg), settings)
    results: list = []
    errors: list = []

    def go() -> None:
        try:
            results.append(build_venvs(plan, settings).for_instance("acme"))
        except BuildError as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(results) == 2
    assert sorted(r.reused for r in results) == [False, True]  # one built, the other waited and reused
    assert not list((settings.venv_dir / ".tmp").glob("*")), "no temp build may be left behind"


def test_gym_sdk_line_is_replaced_by_the_pinned_sdk(tmp_path: Path, make_settings) -> None:
    files = tmp_path / "files"
    for name, version in (("nemo-gym", "0.4.0"), ("ray", "2.60.0"), ("openai", "2.7.2")):
        build_wheel(files, name, version)
    from tests.helpers.index import write_simple_index

    pkg = synthetic_pkg(tmp_path / "pkg", {"acme": ("resources_servers", "-e nemo-gym[dev] @ ../../\n")})
    settings = make_settings(write_simple_index(files, tmp_path / "idx"))
    plan = plan_venvs(merged_config(pkg), settings)
    vp = plan.for_instance("acme")
    assert any("replaced by `nemo-gym[dev]==0.4.0`" in n for n in vp.notes)  # the extras are kept
    assert [p.requirement for p in vp.pins] == ["nemo-gym==0.4.0", "ray[default]==2.60.0", "openai==2.7.2"]
    assert not vp.pins[0].as_constraint  # auto mode, SDK server: the full set is installed
    v = build_venvs(plan, settings).for_instance("acme")
    installed = json.loads((v.path / MARKER).read_text())["installed"]
    assert {installed[n] for n in ("nemo-gym", "ray", "openai")} == {"0.4.0", "2.60.0", "2.7.2"}
    assert (v.path / ".gym-runtime" / "gym-runtime-pins.txt").is_file()


def test_auto_mode_pins_only_constrain_non_sdk_servers(tmp_path: Path, make_settings) -> None:
    files = tmp_path / "files"
    build_wheel(files, "openai", "2.7.2")
    build_wheel(files, "openai", "2.9.0")
    build_wheel(files, "tinyparse", "0.3.0")
    from tests.helpers.index import write_simple_index

    pkg = synthetic_pkg(
        tmp_path / "pkg", {"light": ("resources_servers", "tinyparse\n"), "oai": ("resources_servers", "openai\n")}
    )
    settings = make_settings(write_simple_index(files, tmp_path / "idx"))
    venvs = build_venvs(plan_venvs(merged_config(pkg), settings), settings)
    light = json.loads((venvs.for_instance("light").path / MARKER).read_text())["installed"]
    oai = json.loads((venvs.for_instance("oai").path / MARKER).read_text())["installed"]
    assert "openai" not in light and "nemo-gym" not in light  # stays light
    assert oai["openai"] == "2.7.2"  # the pin, not the newest
    none = make_settings(write_simple_index(files, tmp_path / "idx2"), pin_mode="none")
    free = build_venvs(plan_venvs(merged_config(pkg), none), none).for_instance("oai")
    assert json.loads((free.path / MARKER).read_text())["installed"]["openai"] == "2.9.0"


def test_several_failures_each_list_their_own_log(tmp_path: Path, make_settings) -> None:
    pkg = synthetic_pkg(
        tmp_path / "pkg",
        {"alpha": ("resources_servers", "nosuch-alpha==1.0\n"), "beta": ("resources_servers", "nosuch-beta==1.0\n")},
    )
    settings = make_settings()  # an empty index: both stage-1 installs fail
    with pytest.raises(BuildError) as ei:
        build_venvs(plan_venvs(merged_config(pkg), settings), settings)
    e = ei.value
    assert e.code == "GR-BUILD-MANY" and len(e.violations) == 2 and e.log is None
    logs = {}
    for v, failure in zip(e.violations, e.extra["failures"], strict=True):
        server = failure["server"]
        assert v.code == "GR-BUILD-MISSING" and f"nosuch-{server}" in v.message
        assert v.hint.endswith(f"\n    log: {failure['log']}")
        assert f"nosuch-{server}" in Path(failure["log"]).read_text()
        logs[server] = failure["log"]
    assert list(logs) == ["alpha", "beta"] and logs["alpha"] != logs["beta"]  # in plan order
    text = e.render()
    for server, log in logs.items():
        assert f"      log: {log}" in text
        assert text.index(f"nosuch-{server}") < text.index(log)  # under its own failure


def test_every_venv_freezes_its_heap_at_exit(tmp_path: Path, make_settings, empty_index: str) -> None:
    """The fast-exit hook (gym_runtime/venvs/exit_hook.py): each process of a built venv registers
    ``gc.freeze`` with atexit before any program code, so finalization's collections skip what is
    alive at exit; the exit code and the program's own atexit handlers are unchanged."""
    pkg = synthetic_pkg(tmp_path / "pkg", {"acme_math": ("resources_servers", "# nothing\n")})
    settings = make_settings(empty_index)
    v = build_venvs(plan_venvs(merged_config(pkg), settings), settings).for_instance("acme_math")
    assert _run(v.python, "import atexit, gc; atexit._run_exitfuncs(); print(gc.get_freeze_count() > 0)") == "True"
    code = "import atexit, sys; atexit.register(print, 'handler ran'); sys.exit(7)"
    out = subprocess.run([str(v.python), "-c", code], capture_output=True, text=True)
    assert (out.returncode, out.stdout.strip()) == (7, "handler ran")
    # and the module Ray's RAY_RUNTIME_ENV_HOOK names in its servers' environment (exercised with a
    # real Ray driver in tests/daemon/test_ray_tasks.py)
    module, function = RAY_HOOK.rsplit(".", 1)
    assert _run(v.python, f"import {module}; print(callable({module}.{function}))") == "True"
