"""The two local images an OpenSandbox server in the tests needs (docs/runtime.md, "What the tests cover, and what they do not").

* The **sandbox image** servers run in: Debian 12 (bookworm, this project's host distribution)
  with ``python3`` (3.11 at ``/usr/bin/python3.11``, the interpreter a venv built on a Debian 12
  host points at), ``ca-certificates`` and ``libstdc++6`` (manylinux wheels link it), made with
  Debian's image tooling exactly as the container tests' base (``tests/helpers/debian_base.py``:
  ``debuerreotype-init`` from this host's apt mirror, slimmed, ``podman import``). No registry.
* The **execd image**: the sandbox image plus ``/execd`` (the test stand-in
  ``execd_standin.py``, run by the image's ``python3``) and ``/bootstrap.sh``; the server copies
  both out of a throwaway container of it (which runs ``tail -f /dev/null``) into each sandbox.
  :func:`refusing_execd_image` is a variant whose ``bootstrap.sh`` starts the stand-in with
  ``EXECD_STANDIN_REFUSE`` set (an execd of another command API; the stand-in's module doc).

Both are tagged by a digest of what makes them (recipe; stand-in and bootstrap bytes), so a rerun
finds them in podman's storage; the bookworm tarball is kept beside the container tests' bases in
``~/.cache/gym-runtime-tests/base-images``. Clear with
``podman images -q 'localhost/gym-runtime-osb-*' | xargs -r podman rmi``.
Raises :class:`tests.helpers.debian_base.BaseUnavailable` (for a clean skip) when an image
cannot be made here.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock

from tests.helpers.debian_base import BaseUnavailable, cache_dir, host_mirror, import_tarball, make_tarball
from tests.helpers.podman import ensure_tools, host_arch, podman, tail

HERE = Path(__file__).resolve().parent
SUITE = "bookworm"
PACKAGES = ("python3", "ca-certificates", "libstdc++6")
STANDIN = HERE / "execd_standin.py"
BOOTSTRAP = HERE / "bootstrap.sh"
CONTAINERFILE = "FROM {base}\nCOPY execd /execd\nCOPY bootstrap.sh /bootstrap.sh\n"


@dataclass
class Images:
    """``sandbox`` and ``execd`` image tags; ``seconds`` per step that ran (empty when both were there)."""

    sandbox: str
    execd: str
    seconds: dict[str, float] = field(default_factory=dict)


def _digest(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:12]


def _exists(tag: str) -> bool:
    return podman("image", "exists", tag, timeout=60, check=False).returncode == 0


def _sandbox_image(arch: str, seconds: dict[str, float]) -> str:
    digest = _digest(SUITE, PACKAGES, arch, "debuerreotype-slimify", "import")
    tag = f"localhost/gym-runtime-osb-sandbox:{SUITE}-{arch}-{digest}"
    if _exists(tag):
        return tag
    tarball = cache_dir() / f"debian-{SUITE}-{arch}-{digest}.tar"
    if not tarball.is_file():
        t0 = time.monotonic()
        make_tarball(arch, tarball, host_mirror(suite=SUITE), suite=SUITE, script=SUITE, packages=PACKAGES)
        seconds["debuerreotype"] = round(time.monotonic() - t0, 1)
    t0 = time.monotonic()
    import_tarball(tarball, tag, arch)
    seconds["import"] = round(time.monotonic() - t0, 1)
    return tag


def _bootstrap(refuse: str | None) -> str:
    """``bootstrap.sh``'s text; with ``refuse``, execd is started with ``EXECD_STANDIN_REFUSE=refuse``."""
    text = BOOTSTRAP.read_text()
    if refuse is None:
        return text
    start = '"$(dirname "$0")/execd" &'
    assert start in text and refuse.isalnum(), refuse
    return text.replace(start, f"EXECD_STANDIN_REFUSE={refuse} {start}")


def _execd_image(base: str, seconds: dict[str, float], refuse: str | None = None) -> str:
    bootstrap = _bootstrap(refuse)
    tag = f"localhost/gym-runtime-osb-execd:{_digest(base, STANDIN.read_bytes(), bootstrap.encode())}"
    if _exists(tag):
        return tag
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="osb-execd-image-") as tmp:
        context = Path(tmp)
        shutil.copy(STANDIN, context / "execd")
        (context / "bootstrap.sh").write_text(bootstrap)
        for name in ("execd", "bootstrap.sh"):
            (context / name).chmod(0o755)
        (context / "Containerfile").write_text(CONTAINERFILE.format(base=base))
        try:
            podman("build", "--pull=never", "-t", tag, "-f", str(context / "Containerfile"), str(context), timeout=600)
        except subprocess.CalledProcessError as e:
            raise BaseUnavailable(f"podman build of the execd image failed: {tail(e.stdout + e.stderr)}") from e
    seconds["execd build" + (f" ({refuse})" if refuse else "")] = round(time.monotonic() - t0, 1)
    return tag


def ensure_images(arch: str | None = None) -> Images:
    """Both images for ``arch`` (default this host's), made and cached when missing. Raises
    :class:`BaseUnavailable`."""
    reason = ensure_tools("podman", "runc")
    if reason:
        raise BaseUnavailable(reason)
    arch = arch or host_arch()
    seconds: dict[str, float] = {}
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache / ".lock")):
        sandbox = _sandbox_image(arch, seconds)
        return Images(sandbox, _execd_image(sandbox, seconds), seconds)


def refusing_execd_image(images: Images, refuse: str) -> str:
    """The execd image whose stand-in refuses the command API the way ``refuse`` names (``token``
    or ``gone``), on ``images.sandbox``; made and cached when missing. Raises :class:`BaseUnavailable`."""
    with FileLock(str(cache_dir() / ".lock")):
        return _execd_image(images.sandbox, images.seconds, refuse)
