"""Run the ``uv`` shipped as a Python dependency (never a system uv) with a clean environment.

Environment hygiene (case C08): the child environment starts from the run's snapshot
(``RuntimeSettings.environ``) minus every ``UV_*`` variable that could redirect an install
(``UV_PYTHON``, ``UV_SYSTEM_PYTHON``, ``UV_PROJECT_ENVIRONMENT``, ...), every ``PIP_*``,
``VIRTUAL_ENV``, ``CONDA_*`` and the ``PYTHON*`` variables that move imports or bytecode. uv's
own index settings (:data:`HONOURED`) stay for stage 1. uv is always told never to download an
interpreter (case C17). :class:`UvEnv` records what was removed and kept; builders log it.

Each uv call runs in its own process group, writes stdout+stderr to a log file, is killed
(SIGTERM, then SIGKILL after a grace) as soon as the cancel event is set, and dies with the
builder (``PR_SET_PDEATHSIG``) when the builder itself is killed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from uv import find_uv_bin

HONOURED = (
    "UV_INDEX_URL",
    "UV_EXTRA_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_INDEX",
    "UV_INDEX_STRATEGY",
    "UV_FIND_LINKS",
    "UV_KEYRING_PROVIDER",
    "UV_NATIVE_TLS",
    "UV_SYSTEM_CERTS",  # the latter: uv >= 0.13's name
    "UV_HTTP_TIMEOUT",
    "UV_INSECURE_HOST",
    "UV_OFFLINE",
    "UV_CONFIG_FILE",
    "UV_CACHE_DIR",
    "UV_LINK_MODE",
    "UV_PRERELEASE",
    "UV_CONCURRENT_DOWNLOADS",
    "UV_CONCURRENT_BUILDS",
    "UV_CONCURRENT_INSTALLS",
    "UV_REQUEST_TIMEOUT",
)
_HONOURED_RE = re.compile(r"^UV_INDEX_[A-Z0-9_]+_(USERNAME|PASSWORD)$")
_PY_SCRUB = (
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PYTHONUSERBASE",
    "PYTHONNOUSERSITE",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONPYCACHEPREFIX",
    "PYTHONSAFEPATH",
    "PYTHONEXECUTABLE",
)
INDEX_KEYS = (
    "UV_INDEX_URL",
    "UV_EXTRA_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_INDEX",
    "UV_INDEX_STRATEGY",
    "UV_FIND_LINKS",
    "UV_OFFLINE",
    "UV_CONFIG_FILE",
    "UV_PRERELEASE",
    "UV_INSECURE_HOST",
)
GRACE_S = 2.0


class Cancelled(Exception):
    """A uv call was stopped because the build was cancelled."""


def uv_binary() -> str:
    """Path of the uv executable from the ``uv`` PyPI package."""
    return find_uv_bin()


def uv_version() -> str:
    """The version of the ``uv`` package (part of every venv digest)."""
    return metadata.version("uv")


def redact_url(value: str) -> str:
    """Mask ``user:password@`` in URLs."""
    return re.sub(r"(://)[^/@\s]+@", r"\1***@", value)


@dataclass(frozen=True)
class UvEnv:
    """The child environment for uv, with what was scrubbed and what was honoured (for logs)."""

    env: dict[str, str]
    scrubbed: tuple[str, ...]
    honoured: dict[str, str]

    def describe(self) -> str:
        """Lines for a build log: effective uv settings, redacted."""
        lines = [f"uv {uv_version()} ({uv_binary()})", "python downloads: never (UV_PYTHON_DOWNLOADS=never)"]
        lines.append("removed from the inherited environment: " + (", ".join(self.scrubbed) or "(nothing)"))
        kept = {k: ("***" if "PASSWORD" in k else redact_url(v)) for k, v in self.honoured.items()}
        lines.append(
            "honoured uv settings: "
            + (", ".join(f"{k}={v}" for k, v in kept.items()) or "(none: uv defaults and uv config files)")
        )
        return "\n".join(lines)

    def index_settings(self) -> dict[str, str]:
        """The honoured settings that change what stage 1 resolves (part of the digest)."""
        return {k: v for k, v in self.honoured.items() if k in INDEX_KEYS or _HONOURED_RE.match(k)}


def make_env(environ: Mapping[str, str], cache_dir: Path | None) -> UvEnv:
    """Build the scrubbed child environment from ``environ`` (an empty mapping means ``os.environ``)."""
    src = dict(environ or os.environ)
    env: dict[str, str] = {}
    scrubbed, honoured = [], {}
    for k, v in src.items():
        if k.startswith("UV_"):
            if k in HONOURED or _HONOURED_RE.match(k):
                env[k] = v
                honoured[k] = v
            else:
                scrubbed.append(k)
        elif k.startswith(("PIP_", "CONDA_", "OPENSANDBOX_")) or k in ("VIRTUAL_ENV", "CONDA_PREFIX") or k in _PY_SCRUB:
            # OPENSANDBOX_*: the sandbox service's credential, never handed to code a build runs
            scrubbed.append(k)
        else:
            env[k] = v
    env["UV_PYTHON_DOWNLOADS"] = "never"
    env["UV_NO_PROGRESS"] = "1"
    env.setdefault("NO_COLOR", "1")
    if cache_dir is not None:
        env["UV_CACHE_DIR"] = str(cache_dir)
        honoured.pop("UV_CACHE_DIR", None)
    return UvEnv(env, tuple(sorted(scrubbed)), dict(sorted(honoured.items())))


@dataclass(frozen=True)
class UvResult:
    """One finished uv call: the command, exit status, its output and the log it went to."""

    argv: tuple[str, ...]
    returncode: int
    output: str
    log: Path
    seconds: float


def run_uv(
    args: list[str],
    *,
    env: Mapping[str, str],
    log: Path,
    cwd: Path,
    cancel: threading.Event | None = None,
    header: str = "",
) -> UvResult:
    """Run ``uv <args>`` appending to ``log``; return its result (never raises for a non-zero exit).

    Raises :class:`Cancelled` when ``cancel`` is set while it runs (the process group is killed).
    """
    return run_command([uv_binary(), *args], env=env, log=log, cwd=cwd, cancel=cancel, header=header)


def run_command(
    argv: list[str],
    *,
    env: Mapping[str, str],
    log: Path,
    cwd: Path,
    cancel: threading.Event | None = None,
    header: str = "",
) -> UvResult:
    """Run ``argv`` in its own process group with output appended to ``log`` (see :func:`run_uv`)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(log, "ab") as fh:
        start = fh.tell()
        shown = " ".join(redact_url(a) for a in argv)
        fh.write(f"{header}$ {shown}\n".encode())
        fh.flush()
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        proc = subprocess.Popen(
            argv,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent(os.getpid()),
        )
        try:
            while True:
                try:
                    rc = proc.wait(timeout=0.1)
                    break
                except subprocess.TimeoutExpired:
                    if cancel is not None and cancel.is_set():
                        kill_group(proc)
                        fh.write(b"\n[gym-runtime] cancelled: uv process group killed\n")
                        raise Cancelled() from None
        except BaseException:
            kill_group(proc)
            raise
        fh.write(f"[exit status {rc} after {time.monotonic() - t0:.2f}s]\n\n".encode())
    with open(log, "rb") as fh:
        fh.seek(start)
        output = fh.read().decode(errors="replace")
    return UvResult(tuple(argv), rc, output, log, time.monotonic() - t0)


def _die_with_parent(parent: int):
    """preexec_fn: ``PR_SET_PDEATHSIG(SIGKILL)``, so a ``kill -9`` of ``gym-runtime build`` (or of
    ``up`` during a build) takes its uv call down too instead of leaving it running under init; the
    signal follows the forking thread, which waits for the child until it exits. Exits at once
    when the parent is already gone (it died between fork and prctl)."""
    from sandbox.netns import set_pdeathsig

    def pre() -> None:
        set_pdeathsig(signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)

    return pre


def kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process group, SIGKILL it after :data:`GRACE_S`, and reap the child."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    try:  # the group leader is gone; make sure no straggler of the group survives
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
