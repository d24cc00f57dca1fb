"""The runtime images built and run for real with Debian's podman (docs/container.md).

Runs only when selected, ``pytest -m container`` (``.ci/run`` runs the host architecture's,
``-m "container and not emulated"``), as root: podman, runc and debuerreotype are installed with
apt-get when missing, the Debian base is made from this host's apt mirror and cached
(``tests/helpers/debian_base.py``), ``Dockerfile.<arch>`` is built against it, and then, as the
image's non-root user: ``doctor --json`` under podman's defaults and with the documented
full-isolation flags, the README's main job, ``up`` stopped by SIGTERM, ``up`` cycles in ONE
container under the image's init, each leaving an orphan for it to reap (no zombie, nothing left),
and a NeMo Gym 0.7.0 tree from the PyPI wheel through validate, build, up and one row.

Each test runs for the host's architecture and for the other one (``amd64`` <-> ``arm64``, marked
``emulated``): that image is built and run under qemu-user emulation
(``tests/helpers/emulation.py``; ``pytest -m "container and emulated"``, outside CI: about an hour
here). ``GYM_RUNTIME_TESTS_IMAGE_<ARCH>`` (``..._ARM64=localhost/gym-runtime:arm64``) names an image
the caller already built from this tree's ``Dockerfile.<arch>``: the tests then run against it
instead of building one (and leave it). Anything that cannot be installed or reached is a skip
that says what.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from packaging.version import Version

from gym_runtime.gym_release import CURRENT, known_release
from tests.helpers.daemon import orphaning_env
from tests.helpers.debian_base import BaseUnavailable, ensure_base
from tests.helpers.emulation import emulation_missing
from tests.helpers.gym_package import assemble_tree_package, gym_wheel, python_312_plus
from tests.helpers.podman import IMAGE_WORKDIR, RuntimeImage, build_image, ensure_tools, host_arch, podman, tail

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
FULL_ISOLATION = ("--security-opt", "unmask=/proc/*")  # docs/container.md: what bubblewrap needs
IMAGE_UID = 10001
PACKAGE = "examples/native-quickstart"
HOST = host_arch()
FOREIGN = "amd64" if HOST == "arm64" else "arm64"
EMULATED_S = 4 * 3600  # a test of the emulated image, the image's build included when it is the first
ARCHES = [
    pytest.param(HOST, id=HOST),
    pytest.param(FOREIGN, id=f"{FOREIGN}-emulated", marks=[pytest.mark.emulated, pytest.mark.timeout(EMULATED_S)]),
]

pytestmark = [pytest.mark.container, pytest.mark.pypi, pytest.mark.timeout(1800)]
# Under qemu-user every process has qemu's own threads besides the program's, and the kernel refuses
# unshare(CLONE_NEWUSER) to a multi-threaded process: no sandbox at all, whatever podman allows.
EMULATED_LEVEL = "none"


def start_flags(image: RuntimeImage) -> list[str]:
    """Start-up deadlines for ``up`` / ``dry-run``: the defaults natively; under emulation servers
    take minutes to import FastAPI, past the 180 s per-server default."""
    return [] if image.arch == HOST else ["--ready-timeout", "1800", "--startup-timeout", "3600"]


def level(image: RuntimeImage, full_flags: bool) -> str:
    """The isolation level the image's daemon gets: natively ``full`` with :data:`FULL_ISOLATION`,
    ``partial`` at podman's defaults (masked /proc); under emulation :data:`EMULATED_LEVEL`."""
    if image.arch != HOST:
        return EMULATED_LEVEL
    return "full" if full_flags else "partial"


@pytest.fixture(scope="module", params=ARCHES)
def image(request: pytest.FixtureRequest) -> Iterator[RuntimeImage]:
    arch = request.param
    if "container" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("builds and runs the runtime image with podman: select it with `pytest -m container`")
    if os.geteuid() != 0:
        pytest.skip("needs root (rootful podman, debootstrap)")
    if not request.getfixturevalue("pypi_available"):
        pytest.skip("PyPI cannot be reached from here: the image build installs from it")
    reason = ensure_tools("podman", "runc") or emulation_missing(arch)
    if reason:
        pytest.skip(reason)
    prebuilt = os.environ.get(f"GYM_RUNTIME_TESTS_IMAGE_{arch.upper()}")
    if prebuilt:  # built from this tree's Dockerfile.<arch> by the caller (an emulated build takes ~40 min)
        assert podman("image", "exists", prebuilt, timeout=60, check=False).returncode == 0, f"no image {prebuilt}"
        yield RuntimeImage(prebuilt, ROOT / "examples", arch)
        return
    try:
        base = ensure_base(arch)
    except BaseUnavailable as e:
        pytest.skip(f"no local Debian base image for {arch}: {e}")
    tag = f"localhost/gym-runtime-test:{arch}-{os.getpid()}"
    t0 = time.monotonic()
    try:
        build_image(ROOT, tag, base.tag, arch, timeout=1200 if arch == HOST else EMULATED_S)
    except subprocess.CalledProcessError as e:
        pytest.fail(f"podman build of Dockerfile.{arch} failed ({base.tag}):\n{tail(e.stdout + e.stderr, 40)}")
    steps = ", ".join(f"{step} {s} s" for step, s in base.seconds.items()) or "nothing to make"
    print(f"Dockerfile.{arch}: built in {time.monotonic() - t0:.0f} s (base {base.source}: {steps})")
    try:
        yield RuntimeImage(tag, ROOT / "examples", arch)
    finally:
        podman("rmi", "-f", tag, timeout=300, check=False)


def doctor(image: RuntimeImage, security: Sequence[str] = ()) -> dict:
    done = image.run("doctor", "--json", security=security, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout)


def test_doctor_as_the_image_user(image: RuntimeImage) -> None:
    default, full = doctor(image), doctor(image, FULL_ISOLATION)
    for report in (default, full):
        assert report["problems"] == [], report["problems"]
        assert report["isolation"]["details"]["uid"] == IMAGE_UID
        python = report["isolation"]["details"]["python"]
        assert known_release(CURRENT).python_spec.contains(python), f"{python} cannot run nemo-gym {CURRENT}"
        assert report["venv_dir"]["writable"] and report["uv"]["cache_dir"]["writable"]
    print(
        f"{image.arch} isolation: podman defaults {default['isolation']['level']} "
        f"({'; '.join(default['isolation']['reasons'])}); with {' '.join(FULL_ISOLATION)} "
        f"{full['isolation']['level']} ({'; '.join(full['isolation']['reasons'])})"
    )
    assert full["isolation"]["level"] == level(image, True), full["isolation"]
    assert default["isolation"]["level"] == level(image, False), default["isolation"]
    # podman masks /proc paths and mounts /proc/sys read-only: bubblewrap cannot run at its defaults
    assert default["isolation"]["level"] in ("partial", "none") and default["isolation"]["reasons"]


def readme_dry_run() -> list[str]:
    """``dry-run PKG --dataset ROWS`` as the README's first command runs it."""
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert block, "README.md has no bash block"
    found = re.search(r"gym-runtime (dry-run \S+ --dataset \S+)", block.group(1))
    assert found, f"the README's first command runs no dry-run: {block.group(1)}"
    return found.group(1).split()


def test_readme_main_job_in_the_image(image: RuntimeImage) -> None:
    done = image.run(
        *readme_dry_run(),
        *start_flags(image),
        security=FULL_ISOLATION,
        timeout=900 if image.arch == HOST else EMULATED_S,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    print(f"{image.arch} {lines[0].strip() if lines else ''}")  # "dry-run: PKG · rows × samples · startup S s"
    assert any(line.startswith("rows: 6") for line in lines), done.stdout
    assert any("no GRPO signal" in line for line in lines) and f"isolation: {level(image, True)}" in done.stderr


def ready_line(name: str, deadline_s: float) -> dict:
    """The ready JSON line from container ``name``'s stdout (``podman logs``), waiting for it."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        logs = podman("logs", name, timeout=60, check=False)
        for line in logs.stdout.splitlines():
            if line.startswith('{"status": "ready"'):
                return json.loads(line)
        state = podman("inspect", "--format", "{{.State.Status}}", name, timeout=60, check=False).stdout.strip()
        assert state == "running", f"container {state} before the ready line:\n{tail(logs.stderr, 30)}"
        time.sleep(1)
    raise AssertionError(f"no ready line in {deadline_s:.0f} s:\n{tail(podman('logs', name, timeout=60).stderr, 30)}")


def test_up_then_sigterm_exits_0(image: RuntimeImage) -> None:
    name = f"gym-runtime-test-up-{os.getpid()}"
    podman(
        "run",
        "-d",
        "--name",
        name,
        *image.run_args("up", PACKAGE, *start_flags(image), security=FULL_ISOLATION),
        timeout=120,
    )
    try:
        ready = ready_line(name, 600 if image.arch == HOST else EMULATED_S)
        assert ready["isolation"] == level(image, True), ready
        print(f"{image.arch} up: ready in {ready['startup_s']} s (fresh venv dir)")
        podman("stop", "--time", "60", name, timeout=120)  # SIGTERM to PID 1 (tini), which forwards it
        code = podman("wait", name, timeout=120).stdout.strip()
        logs = podman("logs", name, timeout=60, check=False)
        assert code == "0", f"exit {code}:\n{tail(logs.stderr, 30)}"
        assert "SIGTERM: stopping" in logs.stderr
    finally:
        podman("rm", "-f", "-v", name, timeout=120, check=False)


def test_up_cycles_in_one_container_leave_no_zombies(image: RuntimeImage, tmp_path: Path) -> None:
    """Podman's default security options (isolation partial: servers are plain processes of the
    container), and a server that leaves an orphan at each start (``orphaning_env``): the orphan is
    PID 1's to reap once the daemon stops the server's process group. 20 cycles natively, 3 under
    emulation; after the last stop nothing is left but PID 1."""
    n = 20 if image.arch == HOST else 3
    pkg = orphaning_env(tmp_path / "acme-orphans")
    subprocess.run(["chmod", "-R", "a+rX", str(pkg)], check=True)  # readable by the image's user
    driver = "/job/tests/up_cycles.py"
    done = image.run(
        "--",
        "python3",
        driver,
        "--cycles",
        str(n),
        "acme-orphans",
        "--policy-base-url",
        "http://127.0.0.1:9/v1",
        *start_flags(image),
        timeout=1200 if image.arch == HOST else EMULATED_S,
        extra=[
            "--entrypoint",
            "tini",
            "-v",
            f"{HERE / 'up_cycles.py'}:{driver}:ro",
            "-v",
            f"{pkg}:{IMAGE_WORKDIR}/acme-orphans:ro",
        ],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    cycles = result["cycles"]
    ready = sorted(c["startup_s"] or 0 for c in cycles)
    print(f"{image.arch}: {n} up cycles: ready in {ready[0]}-{ready[-1]} s, median {ready[n // 2]} s")
    assert [c["code"] for c in cycles] == [0] * n, cycles
    assert all(c["startup_s"] is not None and c["isolation"] == level(image, False) for c in cycles), cycles
    assert all(c["adopted"] >= 1 for c in cycles), f"no orphan reached PID 1: {cycles}"
    assert result["zombies"] == [], result["zombies"]
    assert result["others"] == [], result["others"]


# Under qemu-user no Ray 2.60 head can serve a server: a driver finds its node's raylet by the
# executable name in the process table (``ray/_private/services.py``, ``_is_raylet_process``), and an
# emulated raylet's command line starts with qemu's interpreter (docs/container.md, "arm64 under
# emulation"). The emulated image runs the same trees with the config's declared ``legacy_agent``
# environment server left out (the runtime's generated relay takes its place): written when that
# server was a Ray driver; it now runs without Ray (its class declares no ``ray_enabled`` and its
# tree imports no Ray: docs/runtime.md, "Ray"), natively too.
RAY_USER = "example_single_tool_call_environment_server"


@pytest.fixture(scope="module")
def gym07_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Gym's ``example_single_tool_call`` from the nemo-gym 0.7.0 wheel, with the trees its config
    names, and its first example row beside it (``gym07-rows.jsonl``), readable by the image's user;
    beside it ``gym07-without-ray``, the same with :data:`RAY_USER` left out of the config."""
    python = python_312_plus()
    if python is None:
        pytest.skip("no pyenv Python with pip here to download the nemo-gym 0.7.0 wheel")
    work = tmp_path_factory.mktemp("gym07")
    wheel = gym_wheel(python, "0.7.0")
    root, rows = assemble_tree_package(
        wheel, "example_single_tool_call", "example_single_tool_call.yaml", work / "gym07"
    )
    assemble_tree_package(
        wheel,
        "example_single_tool_call",
        "example_single_tool_call.yaml",
        work / "gym07-without-ray",
        leave_out=(RAY_USER,),
    )
    (work / "gym07-rows.jsonl").write_text(json.dumps(rows[0]) + "\n")
    subprocess.run(["chmod", "-R", "a+rX", str(work)], check=True)
    return root


def test_gym_07_tree_validate_build_up_and_one_row(image: RuntimeImage, gym07_package: Path) -> None:
    """The image's Python runs the current Gym release: its server venvs get GYM_RUNTIME_PYTHON
    (>= 3.13.14) and the release's pins, and the stub model's row through Gym's own simple_agent
    and example_single_tool_call scores 1.0. Natively the config as Gym ships it (its
    ``legacy_agent`` environment server runs without Ray: no head starts); under emulation
    without that one server (:data:`RAY_USER`)."""
    emulated = image.arch != HOST
    source = gym07_package.with_name("gym07-without-ray") if emulated else gym07_package
    driver, pkg = "/job/tests/gym_tree_run.py", f"{IMAGE_WORKDIR}/gym07"
    t0 = time.time()
    done = image.run(
        "--",
        "python3",
        driver,
        "gym07",
        "gym07-rows.jsonl",
        "example_single_tool_call_simple_agent",
        *start_flags(image),
        security=FULL_ISOLATION,
        timeout=EMULATED_S if emulated else 1800,
        extra=[
            "--entrypoint",
            "tini",
            "-v",
            f"{HERE / 'gym_tree_run.py'}:{driver}:ro",
            "-v",
            f"{source}:{pkg}:ro",
            "-v",
            f"{gym07_package.parent / 'gym07-rows.jsonl'}:{pkg}-rows.jsonl:ro",
        ],
    )
    wall = time.time() - t0
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["validate"]["code"] == 0 and '"valid": true' in got["validate"]["out"], got["validate"]
    assert got["build"]["code"] == 0, got["build"]
    for venv in got["build"]["venvs"]:
        assert venv["python_origin"] == "GYM_RUNTIME_PYTHON", venv
        assert Version(venv["python"]) >= Version("3.13.14") and f"nemo-gym=={CURRENT}" in venv["pins"], venv
    up = got["up"]
    assert up, f"up printed no ready line; its stderr:\n{got['stderr']}"
    assert {"policy_model", "example_single_tool_call", "example_single_tool_call_simple_agent", RAY_USER} <= set(
        up["servers"]
    )
    assert up["ray"]["mode"] == "none" and up["ray"]["without"] == ([] if emulated else [RAY_USER]), up["ray"]
    assert up["policy_model"]["stub"] is True
    assert got["row"] == {
        "reward": 1.0,
        "error": None,
        "output_types": ["function_call", "function_call_output", "message"],
    }, got["row"]
    assert got["stop"]["code"] == 0, got["stderr"]
    assert got["others"] == [], got["others"]
    print(
        f"{image.arch} nemo-gym {CURRENT} tree: validate {got['validate']['wall_s']} s, build {got['build']['wall_s']} s, "
        f"up ready in {up['startup_s']} s, one row, stop {got['stop']['wall_s']} s; container "
        f"{wall:.0f} s (start {got['started'] - t0:.0f} s, exit {t0 + wall - got['finished']:.0f} s)"
    )
