"""Run INSIDE the runtime image: one NeMo Gym tree through the commands a job uses.

    tini -- python3 gym_tree_run.py PKG ROWS.jsonl AGENT [more up arguments]

``gym-runtime validate PKG``, ``gym-runtime build PKG --json``, then ``gym-runtime up PKG`` (the stub
model as policy): once its ready line is out, the first row of ``ROWS.jsonl`` goes to the head
server's ``/rollouts/run`` for agent ``AGENT``, then SIGTERM stops ``up``. Prints ONE JSON line:
``{"started": epoch s, "validate": {"code", "out"}, "build": {"code", "wall_s", "venvs": [{"servers", "python",
"python_origin", "pins"}]}, "up": {ready line}, "row": {"reward", "error", "output_types"},
"stop": {"code", "wall_s"}, "others": [...], "stderr": head and tail, "finished": epoch s}``; ``others`` are the live
processes left after the stop (PID 1 and this script aside). Uses only the image's own Python,
httpx and psutil.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import httpx
import psutil


def run(*argv: str, timeout_s: float) -> dict:
    """``gym-runtime ARGV``: exit code, wall time, stdout, the tail of stderr."""
    t0 = time.monotonic()
    done = subprocess.run(["gym-runtime", *argv], capture_output=True, text=True, timeout=timeout_s)
    return {
        "code": done.returncode,
        "wall_s": round(time.monotonic() - t0, 1),
        "out": done.stdout,
        "err": done.stderr[-3000:],
    }


def one_row(head: str, row: dict, agent: str) -> dict:
    body = {"examples": [{**row, "agent_ref": {"type": "responses_api_agents", "name": agent}}]}
    try:
        r = httpx.post(f"{head}/rollouts/run", json=body, timeout=1800, trust_env=False)
        result = r.json()["results"][0]
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as e:
        return {"error": f"{type(e).__name__}: {e}"}
    return {
        "reward": result.get("reward"),
        "error": result.get("error"),
        "output_types": [o.get("type") for o in (result.get("response") or {}).get("output") or []],
    }


def leftovers() -> list[str]:
    """``"PID STATUS CMDLINE"`` of every process but PID 1 and this script (zombies included)."""
    found = []
    for p in psutil.process_iter():
        if p.pid in (1, os.getpid()):
            continue
        try:
            status = p.status()
            cmd = "" if status == psutil.STATUS_ZOMBIE else " ".join(p.cmdline())[:160]
        except psutil.Error:
            continue
        found.append(f"{p.pid} {status} {cmd}")
    return found


def main() -> int:
    pkg, rows, agent, up_args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    row = json.loads(open(rows).readline())
    out: dict = {"started": time.time(), "validate": run("validate", pkg, timeout_s=600)}
    out["build"] = run("build", pkg, "--json", timeout_s=3600)
    try:
        plan = json.loads(out["build"].pop("out"))["plan"]
        out["build"]["venvs"] = [
            {k: v[k] for k in ("servers", "python", "python_origin")} | {"pins": [p["requirement"] for p in v["pins"]]}
            for v in plan["venvs"]
        ]
    except (ValueError, KeyError) as e:
        out["build"]["venvs"] = f"no plan in the output of build --json: {type(e).__name__}: {e}"
    log = tempfile.TemporaryFile("w+")  # up's stderr: a file, so a chatty start can never block on a full pipe
    up = subprocess.Popen(["gym-runtime", "up", pkg, *up_args], stdout=subprocess.PIPE, stderr=log, text=True)
    line = up.stdout.readline()  # the ready line, or '' when up exits first
    out["up"] = json.loads(line) if line.strip() else {}
    out["row"] = one_row(out["up"]["head_server"], row, agent) if out["up"] else {"error": "no ready line"}
    t0 = time.monotonic()
    up.send_signal(signal.SIGTERM)
    try:
        code = up.wait(120)
    except subprocess.TimeoutExpired:
        up.kill()
        code = up.wait()
    out["stop"] = {"code": code, "wall_s": round(time.monotonic() - t0, 1)}
    log.seek(0)
    text = log.read()
    out["stderr"] = (
        text if len(text) <= 6000 else text[:1500] + "\n[...]\n" + text[-4500:]
    )  # an error's header and its end
    time.sleep(1.0)  # let the init reap
    out["others"] = leftovers()
    out["finished"] = time.time()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
