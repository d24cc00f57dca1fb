"""Loopback stand-ins for public hosts, for egress tests (loopback only; no real DNS).

* :func:`standin_servers`: HTTP on ``<addr>:80`` and HTTPS on ``<addr>:443`` for a random
  ``127.x.y.z`` (binding 80/443 needs root or CAP_NET_BIND_SERVICE), answering
  ``hello <Host>`` and serving a simple index (``/simple/<pkg>/``) of tiny wheels.
* :class:`RecordingResolver`: the resolver injected into the sandbox proxy; maps test names to
  the stand-in address (or any address given, e.g. a metadata IP that must never be dialled).
* :func:`make_ca`: a CA and a server certificate for the test names (openssl CLI).
* :func:`make_venv`: a real ``uv venv`` (optionally with httpx/requests from the uv cache, offline).
"""

from __future__ import annotations

import importlib.metadata
import random
import socket
import ssl
import subprocess
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import uv

from tests.helpers.packages import write_wheel

CLIENT_PINS = (
    "httpx",
    "httpcore",
    "h11",
    "anyio",
    "idna",
    "certifi",
    "sniffio",
    "typing_extensions",
    "requests",
    "charset-normalizer",
    "urllib3",
)


@dataclass
class RecordingResolver:
    """``resolver(host) -> [ip]`` for the proxy; records every call; unknown names raise OSError."""

    table: dict[str, str]
    calls: list[str] = field(default_factory=list)

    def __call__(self, host: str) -> list[str]:
        self.calls.append(host)
        if host not in self.table:
            raise OSError(f"test resolver: unknown name {host}")
        return [self.table[host]]


def make_ca(d: Path, names: list[str]) -> tuple[Path, Path, Path]:
    """(ca.pem, server cert, server key) with SANs ``names`` (wildcards allowed)."""
    d.mkdir(parents=True, exist_ok=True)
    run = lambda *a: subprocess.run(["openssl", *a], check=True, capture_output=True, cwd=d)  # noqa: E731
    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=sandbox test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    )
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=standin")
    (d / "ext.cnf").write_text("subjectAltName=" + ",".join(f"DNS:{n}" for n in names) + "\n")
    run(
        "x509",
        "-req",
        "-in",
        "srv.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "srv.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    )
    return d / "ca.pem", d / "srv.pem", d / "srv.key"


class _Handler(BaseHTTPRequestHandler):
    wheels: Path

    def log_message(self, *a: object) -> None:
        pass

    def _send(self, code: int, body: bytes, ctype: str = "text/plain") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        parts = [p for p in self.path.split("?")[0].split("/") if p]
        if parts[:1] == ["simple"] and len(parts) == 2:
            links = "".join(
                f'<a href="/files/{w.name}">{w.name}</a>'
                for w in sorted(self.wheels.glob("*.whl"))
                if w.name.split("-")[0].replace("_", "-") == parts[1]
            )
            return self._send(200, f"<html><body>{links}</body></html>".encode(), "text/html")
        if parts[:1] == ["files"] and len(parts) == 2 and (self.wheels / parts[1]).is_file():
            return self._send(200, (self.wheels / parts[1]).read_bytes(), "application/octet-stream")
        self._send(200, f"hello {self.headers.get('Host', '')}".encode())

    do_HEAD = do_GET


@dataclass
class Standins:
    addr: str
    servers: list[ThreadingHTTPServer]
    ca: Path

    def close(self) -> None:
        for s in self.servers:
            s.shutdown()
            s.server_close()


def _serve(server: ThreadingHTTPServer) -> ThreadingHTTPServer:
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def standin_servers(tmp: Path, names: list[str]) -> Standins:
    """Start HTTP :80 + HTTPS :443 on a free random 127.x.y.z; wheel ``tinypkg-1.0`` in the index."""
    wheels = tmp / "wheels"
    write_wheel(wheels, "tinypkg-1.0-py3-none-any.whl")
    ca, cert, key = make_ca(tmp / "tls", names)
    handler = type("H", (_Handler,), {"wheels": wheels})
    for _ in range(50):
        addr = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"
        try:
            http = ThreadingHTTPServer((addr, 80), handler)
        except OSError:
            continue
        try:
            https = ThreadingHTTPServer((addr, 443), handler)
        except OSError:
            http.server_close()
            continue
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert, key)
        https.socket = ctx.wrap_socket(https.socket, server_side=True)
        return Standins(addr, [_serve(http), _serve(https)], ca)
    raise RuntimeError("no free 127.x.y.z with ports 80 and 443")


def plain_server(addr: str = "127.0.0.1") -> ThreadingHTTPServer:
    """An HTTP stand-in on ``addr`` and a free port (e.g. a policy model endpoint)."""
    handler = type("H", (_Handler,), {"wheels": Path("/nonexistent")})
    return _serve(ThreadingHTTPServer((addr, 0), handler))


def make_venv(path: Path, clients: bool = False, python: str = "3.11") -> Path | None:
    """``uv venv`` at ``path`` (bytecode-compiled installs); with ``clients`` also httpx + requests
    installed offline from the uv cache at the project's versions. Returns the interpreter, or None
    when the client packages are not in the cache."""
    uvb = uv.find_uv_bin()
    subprocess.run([uvb, "venv", "-q", "--python", python, str(path)], check=True)
    if clients:
        pins = []
        for name in CLIENT_PINS:
            try:
                pins.append(f"{name}=={importlib.metadata.version(name)}")
            except importlib.metadata.PackageNotFoundError:
                continue
        r = subprocess.run(
            [
                uvb,
                "pip",
                "install",
                "-q",
                "--offline",
                "--no-deps",
                "--compile-bytecode",
                "--python",
                str(path / "bin" / "python"),
                *pins,
            ],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            return None
    return path / "bin" / "python"


def free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
