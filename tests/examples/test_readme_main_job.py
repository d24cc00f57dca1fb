"""The README's two commands, as a newcomer meets them.

The first command is run the way a new user would: a fresh ``git clone`` in a temporary
directory, an empty ``HOME``, none of the caller's ``UV_*``, ``VIRTUAL_ENV``, ``GYM_RUNTIME_*`` or
Python variables, and a ``PATH`` made of the standard system directories, with one of three
machines in front:

- ``managed-python``: a Python that is not the distribution's (pyenv, conda, a ``python:3.x``
  image): the Python running these tests when it is one;
- ``distribution-python``: the distribution's own ``python3`` under PEP 668 (its stdlib holds
  ``EXTERNALLY-MANAGED``: Debian 12, Ubuntu 24.04), first on ``PATH``;
- ``uv-on-path``: a machine where ``uv`` is already installed.

It must end with the reward table, build the project's ``.venv`` from that machine's Python and
install nothing into it. The command text is read from the README, so the two cannot drift.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest
import uv

from tests.examples.conftest import ROOT

# Debian's default PATH: what a login shell on a fresh machine has.
SYSTEM_PATH = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
DISTRIBUTION_PYTHON = Path("/usr/bin/python3")
INHERITED_NOT = ("UV_", "VIRTUAL_ENV", "GYM_RUNTIME_", "NMP_RL_SANDBOX_", "PYTHON", "PYENV", "CONDA", "XDG_")


def readme_commands() -> list[str]:
    """The README's first bash block, one command per line: [main job, test suite]."""
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert block, "README.md has no bash block"
    commands = block.group(1).strip().splitlines()
    assert len(commands) == 2, commands
    return commands


def test_ci_runs_the_readme_test_command() -> None:
    """``.ci/run`` runs the README's test command itself, in the foreground, its status kept."""
    steps = [
        line.strip()
        for line in (ROOT / ".ci/run").read_text().splitlines()
        if line.strip() and not line.startswith(("#", "set ", "cd "))
    ]
    assert f"{readme_commands()[1]} || suite_rc=$?" in steps


def test_uvw_without_uv_or_pip_says_what_to_install(tmp_path: Path) -> None:
    """On a machine with neither ``uv`` nor pip, the wrapper names both ways out and creates nothing."""
    if any((Path(d) / "uv").exists() for d in SYSTEM_PATH):
        pytest.skip("uv is installed in a system directory here")
    no_pip = tmp_path / "no-pip"
    subprocess.run([_base_python(), "-m", "venv", "--without-pip", str(no_pip)], check=True, timeout=120)
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "uvw").write_bytes((ROOT / "uvw").read_bytes())
    (checkout / "uvw").chmod(0o755)
    env = _newcomer_env(tmp_path / "home", [str(no_pip / "bin"), *SYSTEM_PATH])
    done = subprocess.run(["./uvw", "--version"], cwd=checkout, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "uv on PATH" in done.stderr and "apt install python3-pip" in done.stderr
    assert sorted(p.name for p in checkout.iterdir()) == ["uvw"]


def test_uvw_failed_fetch_leaves_nothing(tmp_path: Path) -> None:
    """A fetch of uv that fails (here: an index nobody answers) exits non-zero and leaves no
    bootstrap directory, complete or partial, so the next run fetches again."""
    if any((Path(d) / "uv").exists() for d in SYSTEM_PATH):
        pytest.skip("uv is installed in a system directory here")
    front = tmp_path / "bin"
    front.mkdir()
    (front / "python3").symlink_to(_base_python())
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "uvw").write_bytes((ROOT / "uvw").read_bytes())
    (checkout / "uvw").chmod(0o755)
    env = {
        k: v
        for k, v in _newcomer_env(tmp_path / "home", [str(front), *SYSTEM_PATH]).items()
        if not k.startswith("PIP_")
    }
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL="http://127.0.0.1:1/simple", PIP_RETRIES="0", PIP_TIMEOUT="5")
    done = subprocess.run(["./uvw", "--version"], cwd=checkout, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "fetching uv from PyPI" in done.stderr
    assert sorted(p.name for p in checkout.iterdir()) == ["uvw"], done.stderr


@dataclass
class Machine:
    python: Path | None  # the python3 put first on PATH; None: the system directories' own
    uv_on_path: bool
    system_first: str | None = None  # a system directory moved to the front of PATH


def _base_python() -> str:
    """The interpreter behind the test's venv (pyenv's, conda's, an image's or the distribution's)."""
    return str(Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}")


def _is_externally_managed(python: str) -> bool:
    stdlib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    return (Path(stdlib) / "EXTERNALLY-MANAGED").exists()


def _machine(kind: str) -> Machine:
    """The machine ``kind`` as seen from here, or a skip saying why this host cannot play it."""
    uv_in_system = [d for d in SYSTEM_PATH if (Path(d) / "uv").exists()]
    if kind == "uv-on-path":
        return Machine(python=Path(_base_python()), uv_on_path=True)
    if uv_in_system:
        pytest.skip(f"uv is installed in {uv_in_system[0]}: every machine here has uv on PATH")
    if kind == "managed-python":
        base = _base_python()
        if sysconfig.get_path("stdlib").startswith("/usr/lib/") or _is_externally_managed(base):
            pytest.skip("the Python running the tests is the distribution's own")
        return Machine(python=Path(base), uv_on_path=False)
    marker = list(Path("/usr/lib").glob("python3*/EXTERNALLY-MANAGED"))
    if not marker or not DISTRIBUTION_PYTHON.exists() or not _is_externally_managed(str(DISTRIBUTION_PYTHON)):
        pytest.skip("no distribution Python under PEP 668 (no /usr/lib/python3*/EXTERNALLY-MANAGED for python3)")
    probe = subprocess.run(
        [str(DISTRIBUTION_PYTHON), "-c", "import sys, pip; print(sys.version_info >= (3, 11))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.stdout.strip() != "True":
        pytest.skip("the distribution's python3 is older than 3.11 or has no pip")
    return Machine(python=None, uv_on_path=False, system_first=str(DISTRIBUTION_PYTHON.parent))


def _newcomer_env(home: Path, path: list[str]) -> dict[str, str]:
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(INHERITED_NOT)}
    # The real uv cache, shared: a clean HOME would otherwise fetch and unpack every wheel of the
    # project and of the example's server venvs again (minutes), and the downloads are not what is
    # under test. uv's cache is content-addressed and safe to share between concurrent runs.
    real_cache = subprocess.run(
        [uv.find_uv_bin(), "cache", "dir"], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    env.update(HOME=str(home), PATH=os.pathsep.join(path), UV_CACHE_DIR=real_cache, COLUMNS="100")
    return env


def _installed(python: str, env: dict[str, str]) -> list[str]:
    """What ``python`` has installed (its own site-packages and the user site under ``env``'s HOME)."""
    return subprocess.run(
        [python, "-m", "pip", "list", "--format=freeze"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.splitlines()


@pytest.mark.pypi
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["managed-python", "distribution-python", "uv-on-path"])
def test_first_readme_command_on_a_fresh_clone(kind: str, tmp_path: Path) -> None:
    machine = _machine(kind)
    command = readme_commands()[0]
    assert "dry-run examples/" in command
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)

    front = tmp_path / "bin"  # what this machine has in front of the system directories
    front.mkdir()
    if machine.python:
        (front / "python3").symlink_to(machine.python)
    if machine.uv_on_path:
        (front / "uv").symlink_to(uv.find_uv_bin())
    system = sorted(SYSTEM_PATH, key=lambda d: d != machine.system_first)
    env = _newcomer_env(tmp_path / "home", [str(front), *system])
    python = str(machine.python or DISTRIBUTION_PYTHON)
    before = _installed(python, env)

    done = subprocess.run(["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True, timeout=900)

    assert done.returncode == 0, done.stderr[-3000:]
    assert "warning[" not in done.stderr, done.stderr[-3000:]  # the main job warns of nothing (e.g. no relay generated)
    lines = done.stdout.strip().splitlines()
    assert any(re.match(r"\s*row\s+line\s+agent\s+k\s+mean\s+std", line) for line in lines), done.stdout
    assert any(line.startswith("rows: 6") for line in lines), done.stdout
    assert any(line.rstrip().endswith("no GRPO signal") for line in lines), done.stdout  # not wrapped in a pipe
    assert (clone / ".uv-bootstrap/bin/uv").exists() is not machine.uv_on_path, done.stderr[-3000:]
    assert (clone / ".venv/bin/python").resolve() == Path(python).resolve(), (
        "the venv is not from this machine's Python"
    )
    assert _installed(python, env) == before, "the command installed something into the machine's Python"
    assert not list(clone.glob(".uv-bootstrap.*")), "a temporary bootstrap directory was left behind"
    assert (
        subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True, check=True).stdout
        == ""
    ), "the command left untracked files the .gitignore misses"


def test_uvw_has_uv_trust_the_system_certificate_store_unless_the_caller_chose(tmp_path: Path) -> None:
    """uv trusts only its bundled roots by default; behind a TLS-inspecting proxy whose CA is in the
    system store (where pip finds it) the bootstrap worked and every uv call after it failed with
    ``invalid peer certificate: UnknownIssuer``. ``./uvw`` sets ``UV_SYSTEM_CERTS=1`` where the
    system has a CA bundle, unless ``UV_SYSTEM_CERTS`` or ``UV_NATIVE_TLS`` is set."""
    bundles = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem")
    if not any(os.access(b, os.R_OK) for b in bundles):
        pytest.skip("this host has no system CA bundle: uv keeps its own roots")
    front = tmp_path / "bin"
    front.mkdir()
    (front / "uv").write_text('#!/bin/sh\necho "UV_SYSTEM_CERTS=${UV_SYSTEM_CERTS:-unset}"\n')
    (front / "uv").chmod(0o755)
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "uvw").write_bytes((ROOT / "uvw").read_bytes())
    (checkout / "uvw").chmod(0o755)
    env = _newcomer_env(tmp_path / "home", [str(front), *SYSTEM_PATH])
    for var in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT"):  # no CA given: the system store's path
        env.pop(var, None)

    def seen(**extra: str) -> str:
        return subprocess.run(
            ["./uvw"], cwd=checkout, env={**env, **extra}, capture_output=True, text=True, check=True, timeout=60
        ).stdout.strip()

    assert seen() == "UV_SYSTEM_CERTS=1"
    assert seen(UV_SYSTEM_CERTS="0") == "UV_SYSTEM_CERTS=0"
    assert seen(UV_NATIVE_TLS="false") == "UV_SYSTEM_CERTS=unset"
