"""The shared-volume delivery mode against a real OpenSandbox server that refuses every host mount
(``[storage] allowed_host_paths = []``; docs/runtime.md, "Delivery modes"). The volume is a podman
named volume the test makes, and the daemon sees it at its mount point on this host
(``GYM_RUNTIME_HOME`` there), as a pod sees its PVC. The sandboxes of this server run without
``CAP_DAC_OVERRIDE`` / ``CAP_DAC_READ_SEARCH``, as a pod of another uid than the daemon's would: a
volume whose root they may not read is then unreadable to them and not to the daemon.

Proven: the bundled example's dry-run, and that of NeMo Gym 0.7.0's ``example_single_tool_call``
tree with its environment server on an interpreter put on the volume, give the local backend's
rewards on every row; Gym 0.7.0's own collector scores every row through ``up``; a wrong
claim name, an unreadable volume and an interpreter neither on the volume nor in the image each
stop the start with their block and leave no sandbox."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.gym_package import assemble_gym_package, gym_venv, gym_wheel
from tests.helpers.gym_python import gym_python
from tests.helpers.opensandbox.fixture import images_or_skip
from tests.helpers.opensandbox.runs import DATASET, EXAMPLE, SANDBOX_PYTHON, daemon_env
from tests.helpers.opensandbox.server import OpenSandboxServer, running_server
from tests.helpers.opensandbox.volume import named_volume, put_interpreter
from tests.opensandbox.test_gym_collector import assert_every_row_scored, collect

pytestmark = [pytest.mark.opensandbox, pytest.mark.slow]
GYM_RELEASE = "0.7.0"
GYM_AGENT = "example_single_tool_call_simple_agent"
DROP = (
    "AUDIT_WRITE",
    "MKNOD",
    "NET_ADMIN",
    "NET_RAW",
    "SYS_ADMIN",
    "SYS_MODULE",
    "SYS_PTRACE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",  # the server's own default list, then
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
)


@pytest.fixture(scope="module")
def volume_server() -> Iterator[OpenSandboxServer]:
    """A server of its own: the session's allows the tests' host paths, this one none."""
    images = images_or_skip()
    with running_server(images.sandbox, images.execd, allowed=(), drop=DROP) as server:
        yield server


@pytest.fixture(scope="module")
def volume(volume_server: OpenSandboxServer) -> Iterator[tuple[str, Path]]:
    """A named volume (its claim name) and its mount point on this host; removed at the end."""
    with named_volume(volume_server) as made:
        yield made


def _dry_run(env: dict[str, str], out: Path) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "gym_runtime.cli.main", "dry-run", str(EXAMPLE), "--dataset", str(DATASET)]
    argv += ["--samples", "2", "--out", str(out), "--json"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env)


def _rewards(out: Path) -> dict:
    rewards: dict = {}
    for line in out.read_text().splitlines():
        row = json.loads(line)
        rewards.setdefault(row.get("row", row.get("task_idx")), []).append(row.get("reward"))
    return {k: sorted(v) for k, v in rewards.items()}


def _env(server: OpenSandboxServer, home: Path, claim: str | None, backend: str = "opensandbox") -> dict[str, str]:
    env = daemon_env(server, home, backend)
    return {**env, "GYM_RUNTIME_OPENSANDBOX_VOLUME": claim} if claim else env


def test_a_host_mount_is_refused_by_the_server_itself(volume_server: OpenSandboxServer, tmp_path: Path) -> None:
    body = {
        "image": {"uri": volume_server.image},
        "entrypoint": ["tail", "-f", "/dev/null"],
        "timeout": 60,
        "resourceLimits": {"cpu": "1"},
        "volumes": [{"name": "t", "host": {"path": str(tmp_path)}, "mountPath": "/t", "readOnly": True}],
    }
    answer = volume_server.api("POST", "/sandboxes", json=body)
    assert answer.status_code == 400 and answer.json()["code"] == "VOLUME::HOST_PATH_NOT_ALLOWED", answer.text


def test_the_example_dry_runs_from_the_volume_with_the_local_rewards(
    volume_server: OpenSandboxServer, volume: tuple[str, Path], tmp_path: Path
) -> None:
    claim, home = volume
    local = _dry_run(_env(volume_server, home, None, "local"), tmp_path / "local.jsonl")
    assert local.returncode == 0, local.stderr[-4000:]
    remote = _dry_run(_env(volume_server, home, claim), tmp_path / "osb.jsonl")
    assert remote.returncode == 0, remote.stderr[-4000:]
    rows = _rewards(tmp_path / "osb.jsonl")
    assert rows == _rewards(tmp_path / "local.jsonl") and len(rows) >= 3
    assert any((home / "delivered").iterdir())  # the package's tree was copied onto the volume
    assert f"shared volume '{claim}' at {home}: seen by a probe sandbox" in remote.stderr
    assert volume_server.sandboxes() == []  # the probe's sandbox and every server's deleted


def _stopped(r: subprocess.CompletedProcess, code: str) -> str:
    assert r.returncode == 1, r.stderr[-4000:]
    assert f"error[{code}]" in r.stderr and "Traceback" not in r.stderr, r.stderr[-4000:]
    print(r.stderr[r.stderr.index(f"error[{code}]") :])
    return r.stderr


def test_a_wrong_claim_name_stops_with_its_block(
    volume_server: OpenSandboxServer, volume: tuple[str, Path], tmp_path: Path
) -> None:
    _, home = volume
    err = _stopped(_dry_run(_env(volume_server, home, "no-such-claim"), tmp_path / "o.jsonl"), "GR-OSB-VOLUME")
    assert "'no-such-claim'" in err and "GYM_RUNTIME_OPENSANDBOX_VOLUME" in err
    assert volume_server.sandboxes() == []
    assert volume_server.docker("GET", "/volumes/no-such-claim").status_code == 404  # not made in its place


def test_a_volume_the_sandboxes_cannot_read_stops_with_its_block(
    volume_server: OpenSandboxServer, volume: tuple[str, Path], tmp_path: Path
) -> None:
    claim, home = volume
    mode = home.stat().st_mode & 0o7777
    home.chmod(0)  # the daemon (root with CAP_DAC_OVERRIDE) still reads it; the sandboxes' root may not
    try:
        r = _dry_run(_env(volume_server, home, claim), tmp_path / "o.jsonl")
    finally:
        home.chmod(mode)
    err = _stopped(r, "GR-OSB-VOLUME-UNREADABLE")
    assert f"'{claim}'" in err and str(home) in err
    assert volume_server.sandboxes() == []


def test_an_interpreter_neither_on_the_volume_nor_in_the_image_stops_with_its_block(
    volume_server: OpenSandboxServer, volume: tuple[str, Path], tmp_path: Path
) -> None:
    claim, home = volume
    python = tmp_path / "py" / "bin" / "python3.11"  # Debian's interpreter at a path the image does not have
    python.parent.mkdir(parents=True)
    shutil.copy2(SANDBOX_PYTHON, python)
    env = {**_env(volume_server, home, claim), "GYM_RUNTIME_PYTHON": str(python)}
    err = _stopped(_dry_run(env, tmp_path / "o.jsonl"), "GR-OSB-INTERPRETER")
    assert str(python) in err and volume_server.image in err
    assert volume_server.sandboxes() == []


def test_doctor_reports_the_mode_and_the_volume(volume_server: OpenSandboxServer, volume: tuple[str, Path]) -> None:
    claim, home = volume
    argv = [sys.executable, "-m", "gym_runtime.cli.main", "doctor", "--json"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=_env(volume_server, home, claim))
    osb = json.loads(r.stdout)["sandbox_backends"]["opensandbox"]
    assert osb["status"] == "ok" and osb["delivery"] == "shared volume", osb
    assert osb["volume"] == {"claim": claim, "mounted_at": str(home)}


@pytest.fixture(scope="module")
def volume_python(volume: tuple[str, Path]) -> str:
    """The interpreter NeMo Gym 0.7.0 needs (:func:`gym_python`: the host's own or the provisioned
    one), put on the volume under the state root (:func:`put_interpreter`): an interpreter the
    sandbox image does not hold must be on the volume. Its path there."""
    return put_interpreter(gym_python(), volume[1])


@pytest.mark.pypi
@pytest.mark.timeout(1800)
def test_the_gym_070_tree_dry_runs_from_the_volume_with_the_local_rewards(
    volume_server: OpenSandboxServer, volume: tuple[str, Path], volume_python: str, tmp_path: Path
) -> None:
    """NeMo Gym 0.7.0's ``example_single_tool_call`` tree from the wheel, unchanged, with its agent
    and environment server, on the interpreter put on the volume; the venvs are built on the
    volume too (the state root), and the same venvs serve the ``local`` run."""
    claim, home = volume
    pkg, rows = assemble_gym_package(gym_wheel(volume_python, GYM_RELEASE), tmp_path / "pkg")
    dataset = tmp_path / "rows.jsonl"
    ref = {"type": "responses_api_agents", "name": GYM_AGENT}
    dataset.write_text("".join(json.dumps({**row, "agent_ref": ref}) + "\n" for row in rows))
    got = {}
    for backend in ("local", "opensandbox"):
        env = {**_env(volume_server, home, claim if backend == "opensandbox" else None, backend)}
        env["GYM_RUNTIME_PYTHON"] = volume_python
        out = tmp_path / f"{backend}.jsonl"
        argv = [sys.executable, "-m", "gym_runtime.cli.main", "dry-run", str(pkg), "--dataset", str(dataset)]
        argv += ["--samples", "1", "--out", str(out), "--json", "--work-dir", str(home / "runs" / backend)]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=1500, env=env)
        assert r.returncode == 0, r.stderr[-4000:]
        got[backend] = _rewards(out)
    assert got["opensandbox"] == got["local"] and len(got["local"]) == 5, got
    assert volume_server.sandboxes() == []


@pytest.mark.pypi
@pytest.mark.timeout(1500)
def test_gyms_collector_scores_every_row_through_up_from_the_volume(
    volume_server: OpenSandboxServer, volume: tuple[str, Path]
) -> None:
    """Gym 0.7.0's ``ng_collect_rollouts`` (its own venv) through the head server of ``up`` on the
    bundled example, every server's sandbox mounting the volume only."""
    venv = gym_venv(GYM_RELEASE)
    if venv is None:
        pytest.skip(f"no Python that nemo-gym {GYM_RELEASE} accepts (run .ci/provision-python)")
    claim, home = volume
    work = home / "collect"  # up's work directory is a sub-path of the volume
    results = collect(volume_server, home, work, "opensandbox", venv / "bin", env=_env(volume_server, home, claim))
    assert_every_row_scored(results)
    assert volume_server.sandboxes() == []
