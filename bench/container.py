"""Runtime image figures for docs/container.md. Prints a report and one JSON line; asserts nothing.

    ./uvw run python bench/container.py [--cold] [--cycles 5] [--arch arm64]

1. base: the cached Debian base (tests/helpers/debian_base.py), or with ``--cold`` one made
   anew with debuerreotype from this host's apt mirror (then removed again);
2. ``podman build`` of ``Dockerfile.<arch>`` against it (no layer cache), the image's size;
3. ``gym-runtime doctor --json`` as the image's user under each podman security option set;
4. time to ready inside one container: ``up examples/native-quickstart`` started and stopped
   ``--cycles`` times at full isolation (the first cycle builds the server venvs);
5. PID 1: ``--cycles`` cycles of a package whose server leaves an orphan at each start
   (tests/helpers/daemon.py ``orphaning_env``), podman's default options, under the image's
   ``tini`` vs with the cycle driver itself as PID 1 (no init): zombies after the last stop.
``--arch`` (default: the host's) of another architecture runs all of it under qemu-user emulation
(tests/helpers/emulation.py). Needs what the container test needs: root, podman/runc/debuerreotype
(installed with apt-get when missing), the apt mirror and PyPI. The image is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.daemon import orphaning_env  # noqa: E402
from tests.helpers.debian_base import ensure_base, host_mirror, import_tarball, make_tarball  # noqa: E402
from tests.helpers.emulation import QEMU, emulation_missing  # noqa: E402
from tests.helpers.podman import IMAGE_WORKDIR, RuntimeImage, build_image, ensure_tools, host_arch, image_size, podman  # noqa: E402

SECURITY = {
    "podman defaults": [],
    "seccomp=unconfined": ["--security-opt", "seccomp=unconfined"],
    "unmask=/proc/sys": ["--security-opt", "unmask=/proc/sys"],
    "unmask=/proc/*": ["--security-opt", "unmask=/proc/*"],
    "unmask=ALL": ["--security-opt", "unmask=ALL"],
    "systempaths=unconfined": ["--security-opt", "systempaths=unconfined"],
}
DRIVER = "/job/bench/up_cycles.py"


def timed(fn, *args, **kw) -> tuple[object, float]:
    t0 = time.monotonic()
    out = fn(*args, **kw)
    return out, round(time.monotonic() - t0, 1)


def cold_base(arch: str, tmp: Path) -> tuple[str, float]:
    """A base made anew (not the cached one); returns its tag and the seconds it took."""
    tag = f"localhost/gym-runtime-base:bench-cold-{os.getpid()}"
    t0 = time.monotonic()
    make_tarball(arch, tmp / "base.tar", host_mirror())
    import_tarball(tmp / "base.tar", tag, arch)
    return tag, round(time.monotonic() - t0, 1)


def cycles(
    image: RuntimeImage, n: int, up_args: list[str], security: list[str], init: bool, mounts: tuple[str, ...] = ()
) -> dict:
    """The in-container driver's result (tests/images/up_cycles.py), or ``{"error": stderr}``."""
    entry = ["--entrypoint", "tini"] if init else ["--entrypoint", "python3"]
    args = ["--", "python3", DRIVER] if init else [DRIVER]
    volumes = [x for m in (f"{ROOT / 'tests/images/up_cycles.py'}:{DRIVER}:ro", *mounts) for x in ("-v", m)]
    done = image.run(*args, "--cycles", str(n), *up_args, security=security, timeout=3600, extra=[*entry, *volumes])
    if done.returncode != 0:
        return {"error": done.stderr[-2000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cold", action="store_true", help="make the base anew instead of using the cached one")
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--arch", choices=sorted(QEMU), default=host_arch(), help="Debian architecture of the image")
    args = ap.parse_args()
    arch = args.arch
    reason = ensure_tools("podman", "runc") or emulation_missing(arch)
    if reason:
        print(f"cannot run: {reason}")
        return 1
    figures: dict = {"arch": arch, "load_avg_1m": os.getloadavg()[0], "cpus": os.cpu_count()}
    tag = f"localhost/gym-runtime-bench:{arch}-{os.getpid()}"
    cleanup = [tag]
    with tempfile.TemporaryDirectory() as tmp:
        if args.cold:
            base_tag, figures["base_s"] = cold_base(arch, Path(tmp))
            cleanup.append(base_tag)
        else:
            base, figures["base_s"] = timed(ensure_base, arch)
            base_tag = base.tag
            figures["base_source"] = base.source
        try:
            _, figures["build_s"] = timed(build_image, ROOT, tag, base_tag, arch, timeout=4 * 3600)
            figures["image_bytes"] = image_size(tag)
            figures["base_bytes"] = image_size(base_tag)
            image = RuntimeImage(tag, ROOT / "examples", arch)
            figures["isolation"] = {}
            for label, flags in SECURITY.items():
                done = image.run("doctor", "--json", security=flags, timeout=300)
                iso = json.loads(done.stdout)["isolation"] if done.returncode == 0 else {"level": "error"}
                figures["isolation"][label] = {"level": iso["level"], "reasons": iso.get("reasons", [])}
            quickstart = cycles(image, args.cycles, ["examples/native-quickstart"], SECURITY["unmask=/proc/*"], True)
            ready = [c["startup_s"] for c in quickstart.get("cycles", [])]
            figures["ready_s"] = {
                "first": ready[0] if ready else None,
                "median_warm": statistics.median(ready[1:]) if len(ready) > 1 else None,
                "all": ready,
                "error": quickstart.get("error"),
            }
            pkg = orphaning_env(Path(tmp) / "acme-orphans")
            subprocess.run(["chmod", "-R", "a+rX", str(pkg)], check=True)
            orphan_args = ["acme-orphans", "--policy-base-url", "http://127.0.0.1:9/v1"]
            mount = (f"{pkg}:{IMAGE_WORKDIR}/acme-orphans:ro",)
            for label, init in (("tini", True), ("no_init", False)):
                out = cycles(image, args.cycles, orphan_args, [], init, mount)
                figures[f"zombies_{label}"] = len(out["zombies"]) if "zombies" in out else out.get("error")
        finally:
            for t in cleanup:
                podman("rmi", "-f", t, timeout=300, check=False)
    mib = 1024 * 1024
    print(
        f"base: {figures['base_s']} s ({'made anew' if args.cold else figures.get('base_source')}), "
        f"{figures['base_bytes'] / mib:.0f} MiB"
    )
    print(f"build: {figures['build_s']} s; image {figures['image_bytes'] / mib:.0f} MiB")
    for label, iso in figures["isolation"].items():
        print(f"isolation [{label}]: {iso['level']} {'; '.join(iso['reasons'])}")
    print(
        f"ready: first {figures['ready_s']['first']} s, then median {figures['ready_s']['median_warm']} s "
        f"(load {figures['load_avg_1m']:.1f} on {figures['cpus']} CPUs)"
    )
    print(
        f"zombies after {args.cycles} orphaning cycles: under tini {figures['zombies_tini']}, "
        f"driver as PID 1 {figures['zombies_no_init']}"
    )
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
