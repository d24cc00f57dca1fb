"""Bench the private tree copies made where no bubblewrap runs: prints figures, asserts nothing.

    ./uvw run python bench/tree_copy.py [PKG ...] [--runs 5] [--synthetic-mb 0]

Without bubblewrap (isolation ``none``, ``partial`` where bubblewrap does not run) each server
runs from a private copy of its tree (``sandbox/treecopy.py``), made at each of its starts. For
each package (default: ``examples/native-quickstart`` and case C52's package) the configuration is
merged as ``dry-run`` merges it (a placeholder policy endpoint: nothing starts) and every server's
tree is copied ``--runs`` times into a temporary directory, as the sandbox copies it; per tree the
files, bytes and the median time. ``--synthetic-mb N`` adds one tree of N MB (64 files of random
bytes) to show the cost of a large tree on this disk.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from gym_runtime.config import build_config  # noqa: E402
from gym_runtime.config.merge import PolicyValues  # noqa: E402
from gym_runtime.package import load_package  # noqa: E402
from sandbox import treecopy  # noqa: E402

DEFAULTS = [ROOT / "examples" / "native-quickstart", ROOT / "tests" / "cases" / "data" / "C52" / "pkg"]
PLACEHOLDER = PolicyValues(base_url="http://127.0.0.1:1/v1", api_key="EMPTY", model_name="bench")


def trees(pkg: Path) -> dict[str, Path]:
    """Instance -> its server tree, as the bring-up finds it (the package first, then the built-ins)."""
    merged = build_config(load_package(pkg), policy=PLACEHOLDER)
    return {name: Path(inst.server_dir.path) for name, inst in merged.instances.items()}


def bench(label: str, tree: Path, runs: int, scratch: Path) -> None:
    seconds, last = [], None
    for i in range(runs):
        dest = scratch / f"{tree.name}-{i}"
        last = treecopy.make(tree, tree.parent.parent, dest)
        seconds.append(last.seconds)
        treecopy.remove(dest)
    assert last is not None
    med = statistics.median(seconds) * 1000
    print(
        f"  {label:<32} {last.files:>6} files {treecopy.human(last.size):>10}  median {med:8.1f} ms"
        f"  (min {min(seconds) * 1000:.1f}, max {max(seconds) * 1000:.1f}; {tree})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("packages", nargs="*", type=Path, default=DEFAULTS)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--synthetic-mb", type=int, default=0)
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, runs per tree: {args.runs}")
    with tempfile.TemporaryDirectory(prefix="tree-copy-") as tmp:
        scratch = Path(tmp) / "copies"
        for pkg in args.packages:
            print(f"{pkg}:")
            found = trees(pkg)
            for name, tree in found.items():
                bench(name, tree, args.runs, scratch)
            total = [treecopy.make(t, t.parent.parent, scratch / f"all-{n}") for n, t in found.items()]
            print(
                f"  all {len(total)} trees at one start: {sum(c.files for c in total)} files, "
                f"{treecopy.human(sum(c.size for c in total))}, {sum(c.seconds for c in total) * 1000:.1f} ms"
            )
            for n in found:
                treecopy.remove(scratch / f"all-{n}")
        if args.synthetic_mb:
            big = Path(tmp) / "pkg" / "resources_servers" / "big"
            (big / "data").mkdir(parents=True)
            chunk = (args.synthetic_mb << 20) // 64
            for i in range(64):
                (big / "data" / f"part{i:02d}.bin").write_bytes(os.urandom(chunk))
            print(f"synthetic tree of {args.synthetic_mb} MB:")
            bench("big", big, args.runs, scratch)


if __name__ == "__main__":
    main()
