"""``dry-run --watch``: a config edit the running environment cannot take is refused with
``GR-CONFIG-WATCH-RESTART`` naming each instance and what changed (an instance added or removed,
another implementation, port or host), so the running servers keep the config they started with;
an edit of a server's own keys is not refused. A venv rebuilt after an edit of its install file
is not given to a server that uses Ray unless the environment joined a Ray cluster
(``GR-BUILD-WATCH-RAY``); an edit of a server's tree after which it uses Ray, where the
environment started it without, is refused (``GR-START-WATCH-RAY``)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from gym_runtime.cli.validate import PLACEHOLDERS
from gym_runtime.config import MergedConfig, PolicyValues, build_config
from gym_runtime.errors import BuildError, ConfigError, StartError
from gym_runtime.package import load_package
from gym_runtime.ray.watch import check_edited, check_rebuilt
from gym_runtime.runtime.reload import _check_compatible
from tests.helpers.daemon import FIXTURE_APP, declaring_ray, simple_env
from tests.helpers.gym_package import python_312_plus

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "native-quickstart"
ARITHMETIC = "resources_servers/example_arithmetic/configs/arithmetic.yaml"


def _merged(pkg: Path) -> MergedConfig:
    return build_config(load_package(pkg), [], PolicyValues(), defaults=PLACEHOLDERS)


@pytest.fixture
def pkg(tmp_path: Path) -> Path:
    return Path(shutil.copytree(EXAMPLE, tmp_path / "pkg"))


def _edit(pkg: Path, old: str, new: str) -> None:
    config = pkg / ARITHMETIC
    text = config.read_text()
    assert old in text
    config.write_text(text.replace(old, new, 1))


def test_a_servers_own_keys_may_change(pkg: Path) -> None:
    before = _merged(pkg)
    _edit(pkg, "      domain: math\n", "      domain: math\n      note: 2\n")
    _check_compatible(before, _merged(pkg))  # nothing raised: the watch restarts that server


def test_a_fixed_port_is_named(pkg: Path) -> None:
    before = _merged(pkg)
    _edit(pkg, "      domain: math\n", "      domain: math\n      port: 18123\n")
    with pytest.raises(ConfigError) as ei:
        _check_compatible(before, _merged(pkg))
    assert ei.value.code == "GR-CONFIG-WATCH-RESTART"
    assert "'arithmetic' changed its port (a free port -> 18123)" in ei.value.message
    assert "start dry-run --watch again" in ei.value.hint


def test_an_added_instance_is_named(pkg: Path) -> None:
    before = _merged(pkg)
    config = pkg / ARITHMETIC
    config.write_text(
        config.read_text() + "arithmetic_two:\n  resources_servers:\n    example_arithmetic:\n"
        "      entrypoint: app.py\n      domain: math\n"
    )
    with pytest.raises(ConfigError) as ei:
        _check_compatible(before, _merged(pkg))
    assert ei.value.code == "GR-CONFIG-WATCH-RESTART" and "'arithmetic_two' was added" in ei.value.message


@pytest.mark.parametrize("mode", ["local", "none"])
def test_a_rebuilt_venv_of_a_ray_user_is_kept_for_the_next_start(tmp_path: Path, mode: str) -> None:
    """``GR-BUILD-WATCH-RAY``: the private Ray head reads the venvs the environment started with
    (``local``), and an environment started without Ray has none to give (``none``)."""
    merged = _merged(simple_env(tmp_path / "pkg", ray=True))
    env = _Running(merged, mode)
    with pytest.raises(BuildError) as ei:
        check_rebuilt(env, {"acme_math": _NewVenv(tmp_path / "new")})
    assert ei.value.code == "GR-BUILD-WATCH-RAY" and ei.value.extra["servers"] == ["acme_math"]
    assert "the rebuilt venv of acme_math cannot be used by the running environment" in ei.value.message
    assert ("private Ray head" if mode == "local" else "started it without Ray") in ei.value.message
    check_rebuilt(env, {"acme_agent": _NewVenv(tmp_path / "new")})  # a server without Ray moves


@pytest.mark.parametrize("mode", ["join", "own"])
def test_a_joined_cluster_or_a_servers_own_ray_takes_the_rebuilt_venv_of_a_server_given_ray(
    tmp_path: Path, mode: str
) -> None:
    merged = _merged(simple_env(tmp_path / "pkg", ray=True))
    check_rebuilt(_Running(merged, mode, needed_by=("acme_math",)), {"acme_math": _NewVenv(tmp_path / "new")})
    with pytest.raises(BuildError) as ei:  # a server the start gave no Ray has none to use on its new venv
        check_rebuilt(_Running(merged, mode), {"acme_math": _NewVenv(tmp_path / "new")})
    assert "the running environment started it without Ray" in ei.value.message


@pytest.mark.parametrize("mode", ["none", "local", "join"])
def test_a_tree_edit_that_brings_ray_to_a_server_started_without_is_refused(tmp_path: Path, mode: str) -> None:
    pkg = simple_env(tmp_path / "pkg")
    env = _Running(_merged(pkg), mode, needed_by=("other",) if mode != "none" else ())
    check_edited(env, ["acme_math", "acme_agent"])  # as it started: nothing to refuse
    (pkg / "resources_servers/acme_math/app.py").write_text(declaring_ray(FIXTURE_APP))
    env.merged = _merged(pkg)
    with pytest.raises(StartError) as ei:
        check_edited(env, ["acme_math", "acme_agent"])
    assert ei.value.code == "GR-START-WATCH-RAY" and ei.value.extra["servers"] == ["acme_math"]
    assert ei.value.message.startswith("after this edit acme_math uses Ray (declares ray_enabled = True (")
    assert "started it without Ray: it keeps running the code it started with" in ei.value.message
    assert "start dry-run --watch again to bring acme_math up with Ray" in ei.value.hint


def test_a_server_given_ray_at_the_start_restarts_after_any_edit(tmp_path: Path) -> None:
    pkg = simple_env(tmp_path / "pkg", ray=True)
    check_edited(_Running(_merged(pkg), "local", needed_by=("acme_math",)), ["acme_math"])  # nothing raised
    (pkg / "resources_servers/acme_math/app.py").write_text(FIXTURE_APP)  # and one that stops using Ray
    check_edited(_Running(_merged(pkg), "local", needed_by=("acme_math",)), ["acme_math"])


UNDECLARED = """class S:
    @classmethod
    def run_webserver(cls):
        pass


S.run_webserver()
"""


def test_an_sdk_server_that_now_imports_ray_is_refused_and_one_that_does_not_compile_restarts(tmp_path: Path) -> None:
    """A NeMo Gym 0.7 server whose class declares nothing runs without Ray while its tree imports
    none; an edit that imports Ray is refused, an edit that does not compile is not (its start
    shows the SyntaxError, where the reading could only say "cannot be read")."""
    pkg = simple_env(tmp_path / "pkg")
    env = _Running(_merged(pkg), "none")
    env.placement.pythons = {n: _sdk_venv(tmp_path / "venv", sys.executable) for n in env.merged.instances}
    app = pkg / "resources_servers/acme_math/app.py"
    app.write_text(UNDECLARED + "def broken(:\n")
    env.merged = _merged(pkg)
    check_edited(env, ["acme_math"])  # nothing raised: the restart shows the SyntaxError
    app.write_text(UNDECLARED + "import ray\n")
    env.merged = _merged(pkg)
    with pytest.raises(StartError) as ei:
        check_edited(env, ["acme_math"])
    assert ei.value.code == "GR-START-WATCH-RAY" and "since app.py:8 imports ray" in ei.value.message


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="needs a daemon Python older than the f-strings of 3.12")
def test_a_file_only_the_servers_newer_python_parses_still_counts_as_ray(tmp_path: Path) -> None:
    newer = python_312_plus()
    if newer is None:
        pytest.skip("no Python 3.12+ here")
    pkg = simple_env(tmp_path / "pkg")
    env = _Running(_merged(pkg), "none")
    env.placement.pythons = {n: _sdk_venv(tmp_path / "venv", newer) for n in env.merged.instances}
    (pkg / "resources_servers/acme_math/app.py").write_text(UNDECLARED + 'd = {"k": 1}\nx = f"{d["k"]}"\n')
    env.merged = _merged(pkg)
    with pytest.raises(StartError) as ei:  # it compiles where it runs: not a broken file, its Ray is unread
        check_edited(env, ["acme_math"])
    assert "app.py cannot be read (SyntaxError)" in ei.value.message


def _sdk_venv(root: Path, python: str) -> Path:
    """A directory shaped like a venv holding the Gym SDK, whose ``bin/python`` is ``python``."""
    (root / "lib/python3.13/site-packages/nemo_gym").mkdir(parents=True, exist_ok=True)
    (root / "lib/python3.13/site-packages/nemo_gym/__init__.py").write_text("")
    (root / "bin").mkdir(exist_ok=True)
    if not (root / "bin/python").exists():
        (root / "bin/python").symlink_to(python)
    return root / "bin" / "python"


class _NewVenv:
    """What :func:`gym_runtime.supervise.venv_swap.rebuild` hands the check: a built venv's ``python``."""

    def __init__(self, root: Path) -> None:
        self.python = str(root / "bin" / "python")


class _Running:
    """The parts of a running environment the checks read: its config, its Ray mode and the servers
    given Ray, each server's Python, its settings (the default ``GYM_RUNTIME_RAY_UNDECLARED``)."""

    def __init__(self, merged: MergedConfig, mode: str, needed_by: tuple[str, ...] = ()) -> None:
        from gym_runtime.settings import load_settings

        self.merged = merged
        self.settings = load_settings({})
        self.ray = type("Ray", (), {"mode": mode, "needed_by": needed_by})()
        self.placement = type("Placement", (), {"pythons": {n: Path("/old/bin/python") for n in merged.instances}})()
