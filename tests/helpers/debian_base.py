"""A local base image for the Dockerfiles where no container registry is reachable (docs/container.md).

Debian forky (testing) with ``python3.13`` and ``python3.13-venv`` (3.13.15 there, as nemo-gym
0.5+ needs >= 3.13.14; Debian 13's python3.13 is 3.13.5) and ``ca-certificates``, for amd64 or
arm64, made from Debian packages with Debian's own image tooling, as the official
``debian:*-slim`` images are: ``debuerreotype-init`` (debootstrap, minbase, with debootstrap's
``sid`` script, which every Debian suite since buster uses) from an apt mirror this host is
configured with, an apt setting that keeps that mirror readable after its Release file's
``Valid-Until`` (:data:`APT_SNAPSHOT_CONF`), ``debuerreotype-minimizing-config`` (no apt caches or docs in later layers),
``debuerreotype-slimify`` and ``debuerreotype-tar``; then ``podman import --arch``. A base of
another architecture than the host's is made under qemu-user emulation
(``tests/helpers/emulation.py``): debootstrap's second stage runs the target's own binaries.

Cache: the tarball is kept in :func:`cache_dir` (``$XDG_CACHE_HOME/gym-runtime-tests/base-images``,
default ``~/.cache/gym-runtime-tests/base-images``), named by a digest of the recipe; the imported
image is tagged ``localhost/gym-runtime-base:forky-<arch>-<digest>``. Clear both with
``rm -rf ~/.cache/gym-runtime-tests/base-images`` and
``podman images -q localhost/gym-runtime-base | xargs -r podman rmi``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from filelock import FileLock

from tests.helpers.emulation import emulation_missing
from tests.helpers.podman import ensure_tools, podman, tail

SUITE = "forky"
DEBOOTSTRAP_SCRIPT = "sid"  # debootstrap 1.0.128 (Debian 12) has no `forky` script; every suite since uses sid's
PACKAGES = ("python3.13", "python3.13-venv", "ca-certificates")
# The base is the mirror as of the day it was made: its apt keeps reading that mirror after the
# Release file's Valid-Until (a week for testing) has passed, as debuerreotype's own apt-get does;
# otherwise a base made from a frozen or snapshot mirror fails the Dockerfile's `apt-get update`.
APT_SNAPSHOT_CONF = ("etc/apt/apt.conf.d/50gym-runtime-base-snapshot", 'Acquire::Check-Valid-Until "false";\n')
STEPS = (
    "debuerreotype-init --non-debian --debootstrap-script",
    APT_SNAPSHOT_CONF,
    "debuerreotype-minimizing-config",
    "debuerreotype-slimify",
    "debuerreotype-tar",
    "import --arch",
    "ENV LANG=C.UTF-8",
)  # part of the recipe digest: change one, get a new base


class BaseUnavailable(RuntimeError):
    """The base cannot be made here; ``str()`` says why (for a clean skip)."""


@dataclass
class Base:
    """``tag`` of the imported image; ``source``: ``podman`` (already imported), ``cache`` (imported
    from the cached tarball) or ``built``; ``seconds`` per step that ran."""

    tag: str
    source: str
    seconds: dict[str, float] = field(default_factory=dict)


def cache_dir() -> Path:
    """Where the base tarballs are kept between runs (outside any checkout)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gym-runtime-tests" / "base-images"


def recipe_digest(arch: str) -> str:
    return hashlib.sha256(repr((SUITE, PACKAGES, STEPS, arch)).encode()).hexdigest()[:12]


def apt_uris(apt_dir: Path = Path("/etc/apt")) -> list[str]:
    """Archive URIs of this host's enabled ``deb`` sources, in apt's reading order: one-line
    ``sources.list`` / ``*.list`` entries, then deb822 ``*.sources`` stanzas (``Types``, ``URIs``,
    ``Enabled``)."""
    uris: list[str] = []
    lists = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]
    for path in (p for p in lists if p.is_file()):
        for line in path.read_text().splitlines():
            words = line.split("#", 1)[0].split()
            if words[:1] == ["deb"]:
                rest = words[1:]
                if rest and rest[0].startswith("["):  # [arch=amd64 signed-by=...]
                    while rest and not rest[0].endswith("]"):
                        rest = rest[1:]
                    rest = rest[1:]
                uris += rest[:1]
    for path in sorted((apt_dir / "sources.list.d").glob("*.sources")):
        for stanza in path.read_text().split("\n\n"):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if line and not line.startswith(("#", " ", "\t")) and ":" in line:
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.strip()
            if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes").lower() != "no":
                uris += fields.get("uris", "").split()
    return uris


def host_mirror(uris: list[str] | None = None, timeout_s: float = 10.0, suite: str = SUITE) -> str:
    """The first of ``uris`` (default :func:`apt_uris`) that serves ``dists/<suite>/InRelease``;
    raises :class:`BaseUnavailable` naming what was tried."""
    tried = []
    for uri in dict.fromkeys(apt_uris() if uris is None else uris):
        if not uri.startswith(("http://", "https://")):
            continue
        try:
            r = httpx.head(f"{uri.rstrip('/')}/dists/{suite}/InRelease", timeout=timeout_s, follow_redirects=True)
            if r.status_code == 200:
                return uri.rstrip("/")
            tried.append(f"{uri} (HTTP {r.status_code})")
        except httpx.HTTPError as e:
            tried.append(f"{uri} ({type(e).__name__})")
    raise BaseUnavailable(f"no apt source of this host serves Debian {suite} (tried: {', '.join(tried) or 'none'})")


def _run(argv: list[str], timeout: float) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise BaseUnavailable(f"`{' '.join(argv)}` did not finish in {timeout:.0f} s") from e
    if done.returncode != 0:
        raise BaseUnavailable(f"`{' '.join(argv)}` failed: {tail(done.stdout + done.stderr)}")


def make_tarball(
    arch: str,
    out: Path,
    mirror: str,
    suite: str = SUITE,
    script: str = DEBOOTSTRAP_SCRIPT,
    packages: tuple[str, ...] = PACKAGES,
) -> None:
    """Debian ``suite`` (made with debootstrap's ``script``) for ``arch`` with ``packages``, slim, as
    a rootfs tarball at ``out`` (under emulation when ``arch`` is not the host's)."""
    reason = ensure_tools("debuerreotype-init", "debootstrap", "wget") or emulation_missing(arch)
    if reason:
        raise BaseUnavailable(reason)
    work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=out.parent))
    rootfs = work / "rootfs"
    try:
        _run(
            [
                "debuerreotype-init",
                "--non-debian",
                "--debootstrap-script",
                script,
                "--arch",
                arch,
                "--include",
                ",".join(packages),
                str(rootfs),
                suite,
                mirror,
            ],
            timeout=3600,
        )
        conf, text = APT_SNAPSHOT_CONF
        (rootfs / conf).write_text(text)
        for step in ("debuerreotype-minimizing-config", "debuerreotype-slimify"):
            _run([step, str(rootfs)], timeout=300)
        _run(["debuerreotype-tar", str(rootfs), str(work / "rootfs.tar")], timeout=300)
        os.replace(work / "rootfs.tar", out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def import_tarball(tarball: Path, tag: str, arch: str) -> None:
    """``podman import`` of a rootfs tarball as image ``tag`` of ``linux/<arch>`` (``LANG=C.UTF-8``,
    as the official Python images set it). Raises ``CalledProcessError``."""
    podman(
        "import",
        "--arch",
        arch,
        "--change",
        'CMD ["/bin/bash"]',
        "--change",
        "ENV LANG=C.UTF-8",
        str(tarball),
        tag,
        timeout=600,
    )


def ensure_base(arch: str) -> Base:
    """The base image for ``arch`` (``amd64``, ``arm64``; another than the host's is made under
    emulation): already imported, imported from the cached tarball, or made and cached first.
    Raises :class:`BaseUnavailable`."""
    reason = ensure_tools("podman", "runc")  # the image is imported with `podman --runtime runc`
    if reason:
        raise BaseUnavailable(reason)
    digest = recipe_digest(arch)
    tag = f"localhost/gym-runtime-base:{SUITE}-{arch}-{digest}"
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    tarball = cache / f"debian-{SUITE}-{arch}-{digest}.tar"
    with FileLock(str(cache / ".lock")):
        if podman("image", "exists", tag, timeout=60, check=False).returncode == 0:
            return Base(tag, "podman")
        base = Base(tag, "cache" if tarball.is_file() else "built")
        if not tarball.is_file():
            t0 = time.monotonic()
            make_tarball(arch, tarball, host_mirror())
            base.seconds["debuerreotype"] = round(time.monotonic() - t0, 1)
        t0 = time.monotonic()
        import_tarball(tarball, tag, arch)
        base.seconds["import"] = round(time.monotonic() - t0, 1)
        return base
