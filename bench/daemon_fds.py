"""How many descriptors the daemon holds per server process; prints figures, asserts nothing.

    ./uvw run python bench/daemon_fds.py [PKG] [--samples N]

Runs ``gym-runtime dry-run PKG --samples N`` (default: the bundled example, 16 samples per row, so
its agents run 32 rollouts at once) and reads ``/proc/PID/fd`` of the daemon every 50 ms: the count
at the environment's ready line, the peak while rollouts run, and the peak divided by the server
processes (the package's instances plus the stub model). ``gym_runtime/inherited.py``'s
``FDS_PER_SERVER`` must stay above that figure (measured on a loaded 2-core host: peaks of 336 to
427 for 8 processes, 42 to 53 each);
``check_open_files`` refuses an environment the open-file limit cannot hold on that basis.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from gym_runtime.inherited import BASE_FDS, FDS_PER_SERVER  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("package", nargs="?", default=str(ROOT / "examples" / "native-quickstart"))
    ap.add_argument("--samples", type=int, default=16)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        err = Path(tmp) / "stderr.txt"
        argv = [sys.executable, "-m", "gym_runtime.cli.main", "dry-run", args.package, "--samples", str(args.samples)]
        with err.open("w") as f:
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=f, cwd=ROOT)
        at_ready = peak = 0
        while proc.poll() is None:
            try:
                n = len(os.listdir(f"/proc/{proc.pid}/fd"))
            except OSError:
                break
            peak = max(peak, n)
            if not at_ready and "environment ready" in err.read_text():
                at_ready = n
            time.sleep(0.05)
        text = err.read_text()
    servers = next((ln for ln in text.splitlines() if "server instance(s):" in ln), "")
    count = int(servers.split("config: ")[1].split()[0]) + ("stub model" in text) if servers else 0
    print(f"exit {proc.returncode}; server processes {count}; descriptors at ready {at_ready}, peak {peak}")
    if count:
        print(f"peak per server process {peak / count:.1f} (FDS_PER_SERVER {FDS_PER_SERVER}, BASE_FDS {BASE_FDS})")


if __name__ == "__main__":
    main()
