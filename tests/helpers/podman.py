"""Debian's podman, as the container test and ``bench/container.py`` use it (docs/container.md).

* :func:`ensure_tools` installs missing Debian packages with ``apt-get`` (as root) and returns why
  it cannot, for a clean skip.
* :func:`podman` runs ``podman --runtime runc``: Debian 12's crun (1.8) refuses hosts with hybrid
  cgroups ("cgroups in hybrid mode not supported"); runc runs on cgroup v1, hybrid and v2.
* :func:`limit_flags`: rootful podman asks the OCI runtime for 1048576 open files and processes by
  default, which root cannot set without ``CAP_SYS_RESOURCE`` (runc: "error setting rlimits");
  containers get this process's own hard limits instead (``nproc`` at most ``kernel.pid_max``,
  podman's own ceiling).
* :func:`host_ca_bundle`: the CA bundle this host's tools are told to trust (``SSL_CERT_FILE``,
  ...), e.g. behind a TLS-inspecting proxy; it goes into the build as the secret ``ca-bundle`` and
  into containers read-only, so uv inside reaches the package index as it does here.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout

# executable -> the Debian package that ships it
TOOLS = {
    "podman": "podman",
    "runc": "runc",
    "debuerreotype-init": "debuerreotype",
    "debootstrap": "debootstrap",
    "wget": "wget",
    "qemu-aarch64-static": "qemu-user-static",
    "qemu-x86_64-static": "qemu-user-static",
    "update-binfmts": "binfmt-support",
}
APT_LOCK = Path("/tmp/gym-runtime-tests-apt.lock")  # held by the test process installing with apt-get
CA_VARS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "CURL_CA_BUNDLE")
CA_IN_CONTAINER = "/run/gym-runtime-ca/ca-bundle.pem"
IMAGE_WORKDIR = "/job/work"  # the image's working directory (Dockerfile WORKDIR, docs/container.md)


def tail(text: str, lines: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def ensure_tools(*executables: str, timeout_s: float = 900) -> str | None:
    """Install the Debian packages of the missing ``executables`` (keys of :data:`TOOLS`) with
    ``apt-get install --no-install-recommends``. Returns None when all are there, else why not (not
    Linux, no apt-get, not root, apt or its mirror failing). Installs from several test processes
    (CI runs the container and OpenSandbox tests beside the suite) take turns (:data:`APT_LOCK`):
    apt refuses a second ``apt-get`` while one runs, which would skip the tests of the second."""
    if all(shutil.which(exe) for exe in executables):
        return None
    try:
        with FileLock(str(APT_LOCK), timeout=timeout_s):
            return _install(executables, timeout_s)
    except Timeout:
        return f"another test process held {APT_LOCK} (apt-get) for {timeout_s:.0f} s"


def _install(executables: Sequence[str], timeout_s: float) -> str | None:
    missing = sorted({TOOLS[exe] for exe in executables if shutil.which(exe) is None})
    if not missing:  # the process before us installed them
        return None
    need = f"missing {', '.join(missing)}"
    if sys.platform != "linux" or shutil.which("apt-get") is None:
        return f"{need}, and no apt-get here to install them"
    if os.geteuid() != 0:
        return f"{need}; installing them needs root (apt-get install {' '.join(missing)})"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    wait = ["-o", f"DPkg::Lock::Timeout={int(timeout_s)}"]  # apt run by anything else (a timer's upgrade)
    for argv in (
        ["apt-get", *wait, "update", "-q"],
        ["apt-get", *wait, "install", "-y", "-q", "--no-install-recommends", *missing],
    ):
        try:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return f"{need}: `{' '.join(argv)}` did not finish in {timeout_s:.0f} s"
        if done.returncode != 0:
            return f"{need}: `{' '.join(argv)}` failed: {tail(done.stderr)}"
    still = [exe for exe in executables if shutil.which(exe) is None]
    return f"{need}: still not on PATH after apt-get install: {', '.join(still)}" if still else None


def podman(*args: str, timeout: float, check: bool = True, **kw) -> subprocess.CompletedProcess:
    """``podman --runtime runc ARGS`` with text output captured; raises ``CalledProcessError``
    (with podman's stderr) when ``check`` and it fails."""
    argv = ["podman", "--runtime", "runc", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if check and done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, argv, done.stdout, done.stderr)
    return done


def limit_flags() -> list[str]:
    """``--ulimit`` flags for ``podman build`` / ``podman run``: this process's hard limits."""
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    nr_open = int(Path("/proc/sys/fs/nr_open").read_text())
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nofile = nr_open if nofile == resource.RLIM_INFINITY else nofile
    nproc = pid_max if nproc == resource.RLIM_INFINITY else min(nproc, pid_max)
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


def host_ca_bundle() -> Path | None:
    """The first of :data:`CA_VARS` naming an existing file, else None (the image's own CAs)."""
    for var in CA_VARS:
        value = os.environ.get(var)
        if value and Path(value).is_file():
            return Path(value)
    return None


def ca_run_flags(ca: Path | None) -> list[str]:
    """``podman run`` flags giving a container the host's CA bundle (read-only) as ``SSL_CERT_FILE``."""
    if ca is None:
        return []
    return ["-v", f"{ca.resolve()}:{CA_IN_CONTAINER}:ro", "-e", f"SSL_CERT_FILE={CA_IN_CONTAINER}"]


def dockerfile(context: Path, arch: str) -> Path:
    """The Dockerfile of Debian architecture ``arch`` (``amd64``, ``arm64``): ``Dockerfile.<arch>``."""
    return context / f"Dockerfile.{arch}"


def build_image(context: Path, tag: str, base: str, arch: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    """``podman build`` of ``context``'s ``Dockerfile.<arch>`` for ``linux/<arch>`` with
    ``BASE_IMAGE=base``, no cached layers, the host's CA bundle as the secret ``ca-bundle``. Raises
    ``CalledProcessError``."""
    ca = host_ca_bundle()
    secret = ["--secret", f"id=ca-bundle,src={ca}"] if ca else []
    return podman(
        "build",
        "--layers=false",
        "--pull=never",
        "--platform",
        f"linux/{arch}",
        *limit_flags(),
        *secret,
        "--build-arg",
        f"BASE_IMAGE={base}",
        "-t",
        tag,
        "-f",
        str(dockerfile(context, arch)),
        str(context),
        timeout=timeout,
    )


def image_size(tag: str) -> int:
    """The image's size in bytes (uncompressed, all layers, as ``podman image inspect`` reports)."""
    return int(json.loads(podman("image", "inspect", tag, timeout=60).stdout)[0]["Size"])


@dataclass
class RuntimeImage:
    """A built runtime image of Debian architecture ``arch`` and how to run it here: this host's
    limits and CA bundle, ``--arch`` (an image of another architecture than the host's runs under
    emulation; podman warns without it), and the host directory ``examples`` read-only at
    ``examples`` under :data:`IMAGE_WORKDIR`, so ``examples/...`` paths work as in the README)."""

    tag: str
    examples: Path
    arch: str = field(default_factory=lambda: host_arch())
    ca: Path | None = field(default_factory=host_ca_bundle)

    def run_args(self, *args: str, security: Sequence[str] = (), extra: Sequence[str] = ()) -> list[str]:
        """``podman run`` options, then the image and ``args`` (``extra`` options go last, e.g.
        ``--entrypoint``, ``-d``, ``--name``)."""
        return [
            *limit_flags(),
            "--arch",
            self.arch,
            *security,
            *ca_run_flags(self.ca),
            "-e",
            "COLUMNS=100",
            "-v",
            f"{self.examples}:{IMAGE_WORKDIR}/examples:ro",
            *extra,
            self.tag,
            *args,
        ]

    def run(self, *args: str, timeout: float, **kw) -> subprocess.CompletedProcess:
        """``podman run --rm``, waited for; never raises on the exit code."""
        return podman("run", "--rm", *self.run_args(*args, **kw), timeout=timeout, check=False)


MACHINES = {"x86_64": "amd64", "aarch64": "arm64"}  # platform.machine() -> Debian's name


def host_arch() -> str:
    """Debian's name for this host's architecture (``amd64``, ``arm64``), as Docker's ``TARGETARCH``:
    ``dpkg --print-architecture``, else from the kernel's machine name."""
    if shutil.which("dpkg"):
        return subprocess.run(
            ["dpkg", "--print-architecture"], capture_output=True, text=True, check=True
        ).stdout.strip()
    machine = platform.machine()
    return MACHINES.get(machine, machine)
