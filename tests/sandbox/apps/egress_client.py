"""Runs INSIDE the sandbox: tries every URL with each HTTP client, raw sockets, uv; prints JSON.

Outcome per attempt: "ok:<body>" / "denied" (a proxy 403) / "error:<text>". Stdlib only, plus
httpx / requests when importable (else that column is "missing").
"""

import json
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.request

spec = json.load(open(sys.argv[1]))
ca = os.environ.get("TEST_CA")
ctx = ssl.create_default_context(cafile=ca) if ca else None


def outcome(fn):
    try:
        code, body = fn()
        return "denied" if code == 403 else f"ok:{body}" if code == 200 else f"status:{code}"
    except Exception as e:  # noqa: BLE001 - every failure is data here
        text = f"{type(e).__name__}: {e}"
        return "denied" if "403" in text else "error:" + text[:200]


def with_urllib(url):
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ctx), urllib.request.ProxyHandler())
    with opener.open(url, timeout=10) as r:
        return r.status, r.read().decode()


clients = {"urllib": with_urllib}
try:
    import httpx

    def with_httpx(url):
        r = httpx.get(url, verify=ctx if ctx else True, timeout=10)
        return r.status_code, r.text

    clients["httpx"] = with_httpx
except ImportError:
    pass
try:
    import requests

    def with_requests(url):
        r = requests.get(url, verify=ca or True, timeout=10)
        return r.status_code, r.text

    clients["requests"] = with_requests
except ImportError:
    pass

out = {"clients": sorted(clients), "http": {}, "raw": {}}
for url in spec.get("urls", []):
    out["http"][url] = {name: outcome(lambda f=f, url=url: f(url)) for name, f in clients.items()}


def raw(ip, port):
    t = time.monotonic()
    s = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET)
    s.settimeout(5)
    try:
        s.connect((ip, port))
        return "connected"
    except OSError as e:
        return f"{e.strerror or e} ({1000 * (time.monotonic() - t):.1f} ms)"
    finally:
        s.close()


for ip, port in spec.get("raw", []):
    out["raw"][f"{ip}:{port}"] = raw(ip, port)

if spec.get("isolation_checks"):
    out["ifaces"] = [n for _, n in socket.if_nameindex()]
    with open("/proc/net/route") as f:
        out["routes"] = len(f.read().splitlines()) - 1
    if out["ifaces"] == ["lo"] and out["routes"] == 0:  # only then may we try non-loopback targets
        out["raw"]["192.0.2.1:80"] = raw("192.0.2.1", 80)
        t = time.monotonic()
        try:
            socket.getaddrinfo(spec["dns_name"], 443)
            out["dns"] = "resolved"
        except OSError as e:
            out["dns"] = f"failed: {e}"
        out["dns_ms"] = 1000 * (time.monotonic() - t)
    out["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    out["writes"] = {}
    for d in spec.get("write_probe", []):
        try:
            with open(os.path.join(d, "sandbox-write-probe"), "w") as f:
                f.write("x")
            out["writes"][d] = "written"
        except OSError as e:
            out["writes"][d] = e.strerror

if "uv" in spec:
    u = spec["uv"]
    out["uv"] = {}
    for label, index in (("allowed", u["index_ok"]), ("denied", u["index_denied"])):
        r = subprocess.run(
            [
                u["bin"],
                "pip",
                "install",
                "--no-cache",
                "--python",
                sys.executable,
                "--target",
                os.path.join(u["target"], label),
                "--index-url",
                index,
                *u.get("extra", []),
                u["package"],
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "UV_HTTP_RETRIES": "0"},
            timeout=120,
        )
        out["uv"][label] = {"rc": r.returncode, "stderr": r.stderr[-600:]}
print(json.dumps(out))
