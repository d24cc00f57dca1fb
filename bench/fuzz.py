"""Fuzz every input surface at full size: prints the count of each outcome, asserts nothing else.

    ./uvw run python bench/fuzz.py [--examples 10000] [--seed N] [TARGET ...]

Targets (``tests/helpers/fuzz_targets.py``): ``manifests`` (``validate``), ``configs`` (``config``,
YAML with interpolations), ``rows`` (dataset JSONL), ``head`` (head server request bodies, rows
answered by an untrusted loopback agent), ``proxy`` (raw bytes to the egress proxy). Each input must
get a result or one of our errors (no traceback, no HTTP 500, no body that is not strict JSON, no
hang); a forbidden outcome stops that target with hypothesis's shrunk example and exit code 1. CI
runs a reduced number (``tests/reliability/test_fuzz.py``, ``tests/cli/test_cli_fuzz.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.fuzz_targets import TARGETS, run_target  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("targets", nargs="*", metavar="TARGET", help=f"default: all of {', '.join(TARGETS)}")
    ap.add_argument("--examples", type=int, default=10_000, help="inputs per target (default 10000)")
    ap.add_argument("--seed", type=int, help="hypothesis seed (default: random)")
    args = ap.parse_args()
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        ap.error(f"unknown target(s) {', '.join(unknown)}; choose from {', '.join(TARGETS)}")
    os.environ.pop("GR_FUZZ_UNSET", None)  # the generated configs name it as an unset variable
    failed = 0
    for name in args.targets or list(TARGETS):
        t0 = time.monotonic()
        try:
            counts = run_target(TARGETS[name], args.examples, args.seed)
        except Exception:  # noqa: BLE001 - report the falsifying example and go on with the next target
            failed += 1
            print(f"{name}: FAILED after {time.monotonic() - t0:.0f} s\n{traceback.format_exc()[-4000:]}", flush=True)
            continue
        total = sum(counts.values())
        shown = ", ".join(f"{label}: {n}" for label, n in sorted(counts.items(), key=lambda kv: -kv[1]))
        print(f"{name}: {total} inputs in {time.monotonic() - t0:.0f} s, 0 forbidden outcomes; {shown}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
