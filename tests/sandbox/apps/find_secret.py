"""Runs INSIDE the sandbox: where can this process find a secret? Prints JSON. Stdlib only.

spec: {"needle_reversed": str, "var": name of the private variable}. Reports whether the variable
is in this process's own environment, and every /proc/PID/environ and cmdline it can read that
holds the needle (its own pid excluded: it holds the variable by design).
"""

import json
import os
import sys

spec = json.load(open(sys.argv[1]))
needle = spec["needle_reversed"][::-1].encode()
me = int(os.readlink("/proc/self"))  # the pid as this /proc numbers it (the host's at partial)
hits, readable = [], []
for pid in (p for p in os.listdir("/proc") if p.isdigit()):
    for what in ("environ", "cmdline"):
        try:
            with open(f"/proc/{pid}/{what}", "rb") as f:
                data = f.read()
        except OSError:
            continue
        if what == "environ":
            readable.append(int(pid))
        if needle in data and int(pid) != me:
            hits.append({"pid": int(pid), "file": what})
print(
    json.dumps(
        {
            "own": needle in os.environ.get(spec["var"], "").encode(),
            "hits": hits,
            "readable": readable,
            "pid": me,
            "argv": sys.argv,
        }
    )
)
