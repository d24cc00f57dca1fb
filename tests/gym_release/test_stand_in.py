"""A NeMo Gym release newer than every line the runtime knows (0.8.0 while the newest known line is
0.7): the 0.7 profile stands in, saying so in one line; the pins come from the release's own
``METADATA`` (markers and extras evaluated with ``packaging``), never 0.7.0's; Ray only where the
metadata and the server's class say; what the stand-in cannot honour is refused in one
``GR-GYM-STAND-IN`` block (docs/runtime.md, "Gym releases")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gym_runtime.cli.main import main
from gym_runtime.gym_release import choose_release, release_for
from gym_runtime.package import load_package
from gym_runtime.settings import load_settings
from tests.helpers.gym_bundle import bundle_package
from tests.helpers.gym_stand_in import stand_in_wheel
from tests.helpers.wheels import build_wheel
from tests.venvs.conftest import synthetic_pkg

WHEEL = "wheels/nemo_gym-0.8.0-py3-none-any.whl"
# the modules the 0.7 profile starts servers through (Gym07.preload_modules)
SDK_FILES = {
    f"nemo_gym/{m}.py": ""
    for m in (
        "server_utils",
        "base_resources_server",
        "base_responses_api_agent",
        "base_responses_api_model",
        "base_environment_server",
    )
}
STAND_IN_REQUIRES = [
    'openai==2.43.0; python_version >= "3.10"',  # the release's own: its marker holds
    'openai<1; python_version < "3"',  # a marker that does not hold here
    'ray[default]>=2.58.0; extra == "ray"',  # Ray only as an extra
    "orjson",
]


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def tiny_stand_in(tmp_path: Path, files: dict[str, str] | None = None, app: str = "# nothing\n") -> Path:
    """A wheels-v1 package of one SDK resources server vendoring a tiny nemo_gym 0.8.0."""
    sdk = build_wheel(
        tmp_path / "sdk",
        "nemo-gym",
        "0.8.0",
        files=SDK_FILES if files is None else files,
        requires=STAND_IN_REQUIRES,
        extras=["ray", "dev"],
    )
    pkg = synthetic_pkg(tmp_path / "pkg", {"acme": ("resources_servers", "nemo-gym\n")}, wheels=[sdk])
    (pkg / "resources_servers" / "acme" / "app.py").write_text(app)
    return pkg


def test_a_vendored_release_of_an_unknown_line_reads_its_own_pins(tmp_path: Path, capsys) -> None:
    pkg = tiny_stand_in(tmp_path)
    code, out, err = _run(capsys, "config", str(pkg), "--json")
    assert code == 0, out + err
    assert json.loads(out)["gym_release"] == {
        "version": "0.8.0",
        "line": "0.8",
        "stand_in": "0.7",
        "source": WHEEL,
        "requires_python": "",
        "openai": "==2.43.0",
        "ray": ">=2.58.0",
        "ray_extra": "ray",
    }
    code, out, err = _run(capsys, "validate", str(pkg))
    assert code == 0 and err == (
        "gym release: NeMo Gym 0.8.0 (line 0.8 is unknown to this runtime: the 0.7 profile stands in, with the "
        f"pins of its own metadata; Requires-Python unknown; from {WHEEL})\n"
    )
    release = choose_release(load_package(pkg), load_settings({"HOME": str(tmp_path)}))
    pins, origins = release.pins(load_settings({"HOME": str(tmp_path)}))
    assert pins["openai"] == "2.43.0" and f"read from {WHEEL}" in origins["openai"]


def test_a_pin_to_an_unknown_line_copies_no_known_release(tmp_path: Path, capsys, monkeypatch) -> None:
    """``GYM_RUNTIME_PIN_NEMO_GYM=0.8.0`` and no wheel: no 0.7.0 figures, no default openai pin (the
    release's own requirement decides when it installs), and the line says so; 0.7.1 stays line 0.7."""
    monkeypatch.setenv("GYM_RUNTIME_PIN_NEMO_GYM", "0.8.0")
    settings = load_settings()
    release = choose_release(None, settings)
    assert (release.line, release.release_line, release.stand_in) == ("0.7", "0.8", True)
    pins, _ = release.pins(settings)
    assert "openai" not in pins and pins["nemo-gym"] == "0.8.0"
    assert release.describe() == (
        "gym release: NeMo Gym 0.8.0 (line 0.8 is unknown to this runtime: the 0.7 profile stands in, its pins "
        "unknown until its wheel is installed (no wheel of it to read); Requires-Python unknown; set by "
        "GYM_RUNTIME_PIN_NEMO_GYM)"
    )
    assert release.to_dict()["openai"] == "" and release.to_dict()["ray"] == ""
    patch = release_for("0.7.1", "set by GYM_RUNTIME_PIN_NEMO_GYM")
    assert not patch.stand_in and patch.to_dict()["openai"] == "==2.44.0" and "stand_in" not in patch.to_dict()
    assert patch.describe().endswith("; set by GYM_RUNTIME_PIN_NEMO_GYM)")  # never "from set by"


def test_ray_only_for_a_class_that_declares_it(tmp_path: Path) -> None:
    """Ray is an extra of the release: an undeclared class gets no Ray driver and no Ray pin (though
    its tree imports Ray, which under 0.7.0 would give it one); a class declaring it gets both."""
    from gym_runtime.config import build_config
    from gym_runtime.package.requirements import read_install_source
    from gym_runtime.ray.use import ray_use
    from gym_runtime.venvs.plan import pins_for

    undeclared = (
        "import ray\nfrom nemo_gym.server_utils import SimpleServer\n\n\nclass Acme(SimpleServer):\n    pass\n\n\n"
        'if __name__ == "__main__":\n    Acme.run_webserver()\n'
    )
    pkg = load_package(tiny_stand_in(tmp_path / "a", app=undeclared))
    merged = build_config(pkg, [], release=choose_release(pkg, load_settings({"HOME": str(tmp_path)})))
    inst = merged.instances["acme"]
    use = ray_use(inst, merged)
    assert not use.uses and not use.skipped and "only as its `ray` extra" in use.why
    settings = load_settings({"HOME": str(tmp_path)})
    source = read_install_source(inst.server_dir.install_file, server="acme")
    names = [p.name for p in pins_for(settings, "auto", source, merged.release, use.uses)]
    assert names == ["nemo-gym", "openai"]

    declared = undeclared.replace("    pass", "    ray_enabled = True")
    pkg = load_package(tiny_stand_in(tmp_path / "b", app=declared))
    merged = build_config(pkg, [], release=choose_release(pkg, settings))
    use = ray_use(merged.instances["acme"], merged)
    assert use.uses and "declares ray_enabled = True" in use.why
    assert "ray" in [p.name for p in pins_for(settings, "auto", source, merged.release, use.uses)]

    # a bare pin (metadata unread): no openai pin, and the Ray pin only for a server with a driver
    bare = release_for("0.8.0", "set by GYM_RUNTIME_PIN_NEMO_GYM")
    assert [p.name for p in pins_for(settings, "auto", source, bare, False)] == ["nemo-gym"]
    assert [p.name for p in pins_for(settings, "auto", source, bare, True)] == ["nemo-gym", "ray"]


def test_what_the_stand_in_cannot_honour_is_refused_in_one_block(tmp_path: Path, capsys) -> None:
    pkg = tiny_stand_in(tmp_path, files={"nemo_gym/server_runtime/base_server.py": ""})
    (pkg / "resources_servers" / "acme" / ".python-version").write_text(">=3.13.14,<3.14\n")
    config = pkg / "configs" / "env.yaml"
    config.write_text(config.read_text() + "sidecar:\n  enabled: true\n")
    code, _, err = _run(capsys, "build", str(pkg), "--json")
    assert (
        code == 1
        and err.count("error[") == 1
        and err.startswith(
            "error[GR-GYM-STAND-IN]: nemo-gym 0.8.0 is of release line 0.8, which this runtime does not know; the "
            "0.7 profile stands in for it and cannot honour 3 things the package asks for"
        )
    )
    assert "GYM_RUNTIME_PIN_NEMO_GYM=0.7.0" in err.splitlines()[-1]
    code, out, _ = _run(capsys, "validate", str(pkg), "--json")  # validate lists them among its findings
    error = json.loads(out)["error"]
    assert code == 1 and {v["code"] for v in error["violations"]} == {"GR-GYM-STAND-IN"}
    found = {(v["file"], v.get("key")) for v in error["violations"]}
    assert found == {
        ("configs/env.yaml", "sidecar"),
        ("resources_servers/acme/.python-version", "acme.resources_servers.acme.python_version"),
        (WHEEL, None),
    }
    moved = next(v for v in error["violations"] if v["file"] == WHEEL)
    assert "has no nemo_gym.server_utils" in moved["message"] and "vendor nemo-gym 0.7.0" in moved["hint"]

    # the fixes each hint names: the block gone, the key set; the moved modules need a newer runtime
    config.write_text(config.read_text().replace("sidecar:\n  enabled: true\n", ""))
    doc = yaml.safe_load(config.read_text())
    doc["acme"]["resources_servers"]["acme"]["python_version"] = "3.13.14"
    config.write_text(yaml.safe_dump(doc))
    code, out, _ = _run(capsys, "validate", str(pkg), "--json")
    assert [v["file"] for v in json.loads(out)["error"]["violations"]] == [WHEEL]


@pytest.mark.pypi
def test_a_stand_in_wheel_made_from_gym_070(tmp_path: Path, capsys) -> None:
    """The acceptance case: 0.7.0's wheel as 0.8.0 with other pins, vendored with Gym's own example."""
    wheel = stand_in_wheel(tmp_path / "w")
    pkg = bundle_package(
        wheel, "resources_servers/example_single_tool_call/configs/example_single_tool_call.yaml", tmp_path / "pkg"
    )
    policy = ["--policy-base-url", "http://127.0.0.1:1/v1", "--policy-model-name", "m"]
    code, out, err = _run(capsys, "config", str(pkg), "--json", *policy)
    assert code == 0, out + err
    assert json.loads(out)["gym_release"] == {
        "version": "0.8.0",
        "line": "0.8",
        "stand_in": "0.7",
        "source": WHEEL,
        "requires_python": ">=3.13.14",
        "openai": "==2.43.0",
        "ray": ">=2.58.0",
        "ray_extra": "ray",
    }


@pytest.mark.pypi
@pytest.mark.slow
def test_the_built_venv_of_a_stand_in_has_its_own_pins(tmp_path: Path) -> None:
    """``GYM_RUNTIME_PIN_NEMO_GYM=0.8.0`` with the stand-in wheel on a find-links dir: the venv of
    Gym's example server holds the openai 0.8.0 requires (2.43.0, not 0.7.0's 2.44.0) and no Ray
    (its class declares none, and Ray is an extra of 0.8.0)."""
    from tests.helpers.gym_package import assemble_gym_package
    from tests.helpers.gym_python import gym_python

    python = gym_python()
    wheel = stand_in_wheel(tmp_path / "w")
    pkg, _ = assemble_gym_package(wheel, tmp_path / "pkg")
    env = {
        **os.environ,
        "GYM_RUNTIME_PIN_NEMO_GYM": "0.8.0",
        "GYM_RUNTIME_PYTHON": str(python),
        "GYM_RUNTIME_HOME": str(tmp_path / "home"),
        "UV_FIND_LINKS": str(wheel.parent),
    }
    build = subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", "build", str(pkg), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    out = json.loads(build.stdout)
    assert out["gym_release"]["stand_in"] == "0.7"
    for name, server in out["servers"].items():
        venv_python = Path(server["path"]) / "bin" / "python"
        probe = "import importlib.metadata as m, importlib.util as u; print(m.version('openai'), u.find_spec('ray'))"
        got = subprocess.run([str(venv_python), "-c", probe], capture_output=True, text=True, timeout=120)
        assert got.stdout.split() == ["2.43.0", "None"], (name, got.stdout, got.stderr)
