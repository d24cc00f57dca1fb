"""Daemon stand-in for the ladder tests (project interpreter): start a Sandbox at the best level
this environment allows, run a probe process inside, print one JSON line."""

import asyncio
import json
import os
import sys
from pathlib import Path

from sandbox import EgressPolicy, ProcessSpec, Sandbox

INSIDE = """
import json, os, socket, urllib.request
out = {"pids": len([p for p in os.listdir('/proc') if p.isdigit()])}
out["cap"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]
out["hosts"] = open("/etc/hosts").read()
try:  # software that resolves its own host name at start-up (case C58)
    out["own"] = [socket.gethostname(), socket.gethostbyname(socket.gethostname())]
except OSError as e:
    out["own"] = [socket.gethostname(), str(e)]
s = socket.socket(); s.settimeout(5)
try:
    s.connect(("127.0.0.1", %d)); out["raw"] = "connected"
except OSError as e:
    out["raw"] = e.strerror
try:
    urllib.request.urlopen("http://evil.example.net/", timeout=10); out["fetch"] = "ok"
except Exception as e:
    out["fetch"] = str(e)
print(json.dumps(out))
"""

# A server that writes beside its own files (sandbox/treecopy.py): under bubblewrap its tree is
# read-only; without it the server runs from a private copy; the package is unchanged either way.
WRITES = """
import json, os
try:
    open("written.txt", "w").write("by the server"); wrote = "ok"
except OSError as e:
    wrote = e.strerror
print(json.dumps({"cwd": os.getcwd(), "wrote": wrote}))
"""


async def tree_check(sb, work: Path, py: Path) -> dict:
    tree = work / "pkg" / "resources_servers" / "acme"
    tree.mkdir(parents=True)
    (tree / "app.py").write_text(WRITES)
    spec = ProcessSpec(
        "acme",
        [str(py), "app.py"],
        tree,
        {"PATH": "/usr/bin", "PYTHONDONTWRITEBYTECODE": "1"},
        read_only_paths=[tree.parent.parent, py.parent.parent],
        tree=tree,
        tree_root=tree.parent.parent,
    )
    lines = await sb.prepare([spec])
    r, w = os.pipe()
    spec.stdout_fd = w
    proc = sb.spawn(spec)
    os.close(w)
    await proc.wait()
    out = json.loads(os.read(r, 65536).decode())
    return {**out, "in_package": out["cwd"] == str(tree), "package": sorted(os.listdir(tree)), "lines": lines}


async def main():
    work, py, port = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    sb = await Sandbox.start(EgressPolicy.from_environ({}), work)
    r, w = os.pipe()
    proc = sb.spawn(
        ProcessSpec(
            "probe",
            [str(py), "-c", INSIDE % port],
            work,
            {"PATH": "/usr/bin"},
            read_only_paths=[py.parent.parent],
            writable_paths=[work],
            stdout_fd=w,
        )
    )
    os.close(w)
    await proc.wait()
    inside = json.loads(os.read(r, 65536).decode())
    tree = await tree_check(sb, work, py)
    print(
        json.dumps(
            {
                "level": sb.level.value,
                "warning": sb.report.warning,
                "reasons": sb.report.reasons,
                "inside": inside,
                "denials": sb.denials,
                "tree": tree,
            }
        )
    )
    await sb.close()


asyncio.run(main())
