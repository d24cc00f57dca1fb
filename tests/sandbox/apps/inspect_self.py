"""Runs INSIDE the sandbox: what can this process see and do? Prints JSON. Stdlib only."""

import json
import os
import sys
import urllib.request

spec = json.load(open(sys.argv[1]))
out = {"pid": os.getpid(), "uid": os.getuid(), "env": dict(os.environ)}
out["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
out["cap_eff"] = next(ln.split()[1] for ln in open("/proc/self/status") if ln.startswith("CapEff"))
out["writes"] = {}
for d in spec["write_probe"]:
    try:
        with open(os.path.join(d, "sandbox-write-probe"), "w") as f:
            f.write("x")
        out["writes"][d] = "written"
    except OSError as e:
        out["writes"][d] = e.strerror
out["visible"] = {p: os.path.exists(p) for p in spec.get("exists_probe", [])}
out["fetch"] = {}
for url in spec.get("fetch", []):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            out["fetch"][url] = r.read().decode()
    except Exception as e:  # noqa: BLE001
        out["fetch"][url] = f"error: {e}"
print(json.dumps(out))
