"""A NeMo Gym 0.7 server whose class declares no ``ray_enabled`` and whose tree imports no Ray runs
without a Ray driver (docs/runtime.md, "Ray"; ``GYM_RUNTIME_RAY_UNDECLARED``).

* The switch itself (``gym_runtime/ray/dist/_gym_runtime_ray_switch.py``) against the real SDK of
  the ``nemo-gym`` 0.7.0 wheel: ``_server_uses_ray`` answers False for an undeclared class only
  under ``GYM_RUNTIME_NO_RAY_DRIVER=1``, whether the module was imported after the switch was
  installed or before (a preloaded parent), and read when asked (a forked server's environment).
* ``up`` on NeMo Gym 0.7.0's ``example_single_tool_call`` tree, unchanged
  (``tests/helpers/gym_package.py``): its environment server (Gym's ``legacy_agent``, undeclared,
  no Ray in its tree) runs without Ray, so no Ray head starts and the host's best isolation holds;
  with ``GYM_RUNTIME_RAY_UNDECLARED=always`` it joins the private head, as under NeMo Gym.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gym_runtime.ray.switch import SOURCE, VAR
from sandbox import probe_isolation
from tests.helpers.daemon import ready_then_stop, up_process
from tests.helpers.gym_package import assemble_gym_package, cache_dir, gym_venv, gym_wheel, release_python

pytestmark = [pytest.mark.pypi, pytest.mark.slow]
RELEASE = "0.7.0"
RELAY = "example_single_tool_call_environment_server"

ASK = """
import os, sys
sys.path.insert(0, {dist!r})
import _gym_runtime_ray_switch as switch
if {before}:
    import nemo_gym.server_utils
switch.install()
from nemo_gym import server_utils as u

class Undeclared(u.SimpleServer):
    pass

class Declared(u.SimpleServer):
    ray_enabled = True

class DeclaredFalse(u.SimpleServer):
    ray_enabled = False

def ask(cls):
    try:
        return u._server_uses_ray(cls)
    except RuntimeError as e:
        return "stop: " + str(e)[:60]

answers = []
for value in (None, "1"):
    os.environ.pop({var!r}, None)
    if value:
        os.environ[{var!r}] = value
    answers.append([ask(Undeclared), ask(Declared), ask(DeclaredFalse)])
print(answers)
"""


@pytest.fixture(scope="module")
def gym_python() -> str:
    python = release_python(RELEASE)
    if python is None:
        pytest.skip(f"no Python that nemo-gym {RELEASE} accepts (run .ci/provision-python)")
    return python


@pytest.mark.parametrize("before", [False, True], ids=["installed-first", "sdk-imported-first"])
def test_the_switch_makes_the_sdk_answer_no_ray_for_an_undeclared_class_only(gym_python: str, before: bool) -> None:
    venv = gym_venv(RELEASE)
    assert venv is not None
    code = ASK.format(dist=str(SOURCE.parent), before=before, var=VAR)
    r = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    # told: undeclared -> no Ray; a class found to declare True when it runs stops the server
    # rather than have the SDK start a cluster in its sandbox
    assert r.stdout.strip().splitlines()[-1] == (
        "[[True, True, False], [False, 'stop: gym-runtime runs this server without Ray, but its class Decl', False]]"
    )


def _up(tmp: Path, python: str, env: dict[str, str]) -> tuple[dict, str, str]:
    """``up`` of the 0.7.0 example until ready, then SIGTERM: (ready JSON, stderr, the relay's log)."""
    pkg, _ = assemble_gym_package(gym_wheel(python, RELEASE), tmp / "pkg")
    info, err = ready_then_stop(
        up_process(pkg, tmp, "--python", python, env={"GYM_RUNTIME_VENV_DIR": str(cache_dir() / "venvs"), **env}),
        timeout=1500,
        stop_s=120,
    )
    return info, err, (Path(info["logs_dir"]) / f"{RELAY}.log").read_text()


def test_the_gym_relay_runs_without_ray_and_no_head_starts(gym_python: str, tmp_path: Path) -> None:
    info, err, log = _up(tmp_path, gym_python, {})
    assert info["ray"] == {"mode": "none", "address": None, "source": "", "needed_by": [], "without": [RELAY]}
    assert info["isolation"] == probe_isolation().level.value
    assert f"ray: {RELAY} runs without Ray: its class does not declare ray_enabled" in err
    assert "ray_head" not in err
    assert "Ray" not in log and "ray_enabled" not in log, log[-3000:]  # neither a cluster nor Gym's warning


def test_always_gives_the_undeclared_relay_a_driver_of_the_private_head(gym_python: str, tmp_path: Path) -> None:
    info, err, log = _up(tmp_path, gym_python, {"GYM_RUNTIME_RAY_UNDECLARED": "always"})
    assert (info["ray"]["mode"], info["ray"]["needed_by"], info["ray"]["without"]) == ("local", [RELAY], [])
    assert f"ray: {RELAY} uses Ray: " in err and "as NeMo Gym does, since GYM_RUNTIME_RAY_UNDECLARED=always" in err
    assert "Connecting to Ray cluster at specified address" in log, log[-3000:]
