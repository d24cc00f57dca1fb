#!/usr/bin/env python3
"""TEST STAND-IN for OpenSandbox's in-sandbox agent ``execd`` (stdlib only; docs/runtime.md, "What the tests cover, and what they do not").

The real execd is a Go binary shipped only as a Docker Hub image, which the tests cannot reach; this
file speaks the part of its HTTP API that the ``opensandbox`` SDK 1.1.1 calls, so the SDK runs
unchanged against a sandbox made by the real ``opensandbox-server``. It runs inside the sandbox on
the sandbox image's ``python3``, started by ``bootstrap.sh``, on port 44772 (``EXECD_PORT``).

Contract (paths, fields and shapes as the SDK's generated execd client and execd's controller use them):

* ``GET /ping`` -> 200.
* ``POST /command`` ``{command | argv, cwd?, background?, envs?, timeout? (ms)}`` -> a stream of JSON
  frames, each followed by a blank line: ``{"type": "init", "text": <command id>}``, then
  ``stdout`` / ``stderr`` ``text`` events, then ``execution_complete`` (``execution_time``, ms) for
  exit 0 or ``error`` (``{"ename": "CommandExecError", "evalue": "<exit code>"}``) otherwise. Every
  frame carries ``timestamp`` (ms since the epoch). A background command answers ``init`` and
  ``execution_complete`` at once; its combined stdout+stderr goes to a file read by byte cursor.
  After the last frame the stream stays open ``EXECD_API_GRACE_SHUTDOWN`` (seconds, float; default
  ``0``) as execd's does (there 1 s by default).
* ``GET /command/status/{id}`` -> ``{id, content, running, exit_code, error, started_at, finished_at}``
  (RFC 3339 times); 404 for an unknown id.
* ``GET /command/{id}/logs?cursor=N`` -> text/plain from byte ``N`` (clamped to the end) of the
  combined output; the next cursor in header ``EXECD-COMMANDS-TAIL-CURSOR``; 400 for an unknown id.
* ``DELETE /command?id=`` -> SIGTERM to the command's process group, SIGKILL after 3 s; 500 when it
  is not running.
* ``POST /files/upload`` (multipart: ``metadata`` JSON ``{path, mode?}`` then ``file`` parts, one
  pair per file, the body possibly chunked), ``GET /files/download?path=``, ``GET /files/info?path=``
  (repeatable), ``DELETE /files?path=``, ``POST /directories`` ``{path: {mode}}``.
* ``/proxy/{port}/{rest}`` (any method) -> the same request to ``http://127.0.0.1:{port}/{rest}``
  inside the sandbox, the answer relayed as it comes (HTTP only, no WebSocket). The server hands
  the SDK ``HOST:PORT/proxy/44772`` as execd's own endpoint: that prefix is served directly.

Errors are ``{"code": ..., "message": ...}`` with a 4xx/5xx status, as execd's ``ErrorResponse``.

``EXECD_STANDIN_REFUSE`` makes it an execd of another command API, refusing the routes the runtime
uses (``/ping`` and ``/proxy/...`` still answer, so a sandbox comes up):

* ``token``: every ``/command``, ``/files`` and ``/directories`` request without an
  ``X-EXECD-ACCESS-TOKEN`` header -> 401 ``{"code": "UNAUTHORIZED", ...}`` (as an execd with
  OpenSandbox 1.3's HMAC access tokens answers a caller that has none);
* ``gone``: every ``/command`` request -> 404 ``{"code": "NOT_FOUND", "message": "no route ..."}``
  (a route this execd no longer has).
"""

from __future__ import annotations

import email.parser
import email.policy
import http.client
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

HOP_HEADERS = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
    "host",
    "content-length",
}
PORT = int(os.environ.get("EXECD_PORT") or 44772)
REFUSE = os.environ.get("EXECD_STANDIN_REFUSE") or ""
TOKEN_HEADER = "X-EXECD-ACCESS-TOKEN"
LOG_DIR = Path(tempfile.mkdtemp(prefix="execd-standin-"))


def now_ms() -> int:
    return int(time.time() * 1000)


def rfc3339(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, UTC).isoformat()


class Command:
    """One started command: its process (own process group), output file, times and exit code."""

    def __init__(self, body: dict) -> None:
        self.id = uuid.uuid4().hex
        self.background = bool(body.get("background"))
        self.content = body.get("command") or " ".join(body.get("argv") or [])
        argv = body.get("argv") or [shutil.which("bash") or "/bin/sh", "-c", body["command"]]
        env = {**os.environ, **{k: str(v) for k, v in (body.get("envs") or {}).items()}}
        self.log = LOG_DIR / f"{self.id}.log"
        out = open(self.log, "wb") if self.background else subprocess.PIPE
        self.started = time.time()
        self.finished: float | None = None
        self.proc = subprocess.Popen(
            argv,
            cwd=body.get("cwd") or None,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT if self.background else subprocess.PIPE,
            start_new_session=True,
        )
        if self.background:
            out.close()
            threading.Thread(target=self.wait, daemon=True).start()
        timeout_ms = body.get("timeout")
        if timeout_ms:
            threading.Timer(timeout_ms / 1000, self.interrupt).start()

    def wait(self) -> int:
        code = self.proc.wait()
        self.finished = self.finished or time.time()
        return code

    def status(self) -> dict:
        code = self.proc.poll()
        return {
            "id": self.id,
            "content": self.content,
            "running": code is None,
            "exit_code": code,
            "error": "" if code in (None, 0) else f"exit status {code}",
            "started_at": rfc3339(self.started),
            "finished_at": rfc3339(self.finished if code is not None else None),
        }

    def interrupt(self) -> bool:
        if self.proc.poll() is not None:
            return False
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(3)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return True


COMMANDS: dict[str, Command] = {}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: object) -> None:  # execd logs only errors
        pass

    # ---- plumbing
    def body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def reply(
        self,
        status: int,
        payload: object = None,
        ctype: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        data = payload if isinstance(payload, bytes) else b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def error(self, status: int, code: str, message: str) -> None:
        self.reply(status, {"code": code, "message": message})

    def route(self, method: str) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        parts = [p for p in url.path.split("/") if p]
        try:
            if parts[:1] == ["proxy"] and len(parts) >= 2 and int(parts[1]) == PORT:  # the SDK's way to execd
                self.path = "/" + "/".join(parts[2:]) + (f"?{url.query}" if url.query else "")
                return self.route(method)
            if parts[:1] == ["proxy"] and len(parts) >= 2:
                return self.proxy(int(parts[1]), "/" + "/".join(parts[2:]) + (f"?{url.query}" if url.query else ""))
            key = (method, url.path)
            if self.refused(method, url.path, parts):
                return None
            if key == ("GET", "/ping"):
                return self.reply(200)
            if key == ("POST", "/command"):
                return self.run_command(json.loads(self.body() or b"{}"))
            if key == ("DELETE", "/command"):
                cmd = COMMANDS.get((query.get("id") or [""])[0])
                if cmd is None or not cmd.interrupt():
                    return self.error(500, "RUNTIME_ERROR", "command not found or not running")
                return self.reply(200)
            if method == "GET" and parts[:2] == ["command", "status"] and len(parts) == 3:
                cmd = COMMANDS.get(parts[2])
                return self.reply(200, cmd.status()) if cmd else self.error(404, "NOT_FOUND", "command not found")
            if method == "GET" and parts[:1] == ["command"] and parts[2:] == ["logs"]:
                return self.logs(parts[1], int((query.get("cursor") or ["0"])[0]))
            if key == ("POST", "/files/upload"):
                return self.upload()
            if key == ("GET", "/files/download"):
                path = Path(query["path"][0])
                return self.reply(200, path.read_bytes(), "application/octet-stream")
            if key == ("GET", "/files/info"):
                return self.reply(200, {p: file_info(Path(p)) for p in query.get("path", [])})
            if key == ("DELETE", "/files"):
                for p in query.get("path", []):
                    Path(p).unlink()
                return self.reply(200)
            if key == ("POST", "/directories"):
                for p, opts in json.loads(self.body() or b"{}").items():
                    Path(p).mkdir(parents=True, exist_ok=True)
                    os.chmod(p, int(str((opts or {}).get("mode") or 755), 8))
                return self.reply(200)
            return self.error(404, "NOT_FOUND", f"no route {method} {url.path}")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as e:
            return self.error(404, "FILE_NOT_FOUND", str(e))
        except (KeyError, ValueError, OSError) as e:
            return self.error(400, "INVALID_REQUEST", f"{type(e).__name__}: {e}")

    def refused(self, method: str, path: str, parts: list[str]) -> bool:
        """Answer as an execd of another command API would (``EXECD_STANDIN_REFUSE``, module doc);
        whether it did."""
        if REFUSE == "token" and parts[:1] in (["command"], ["files"], ["directories"]):
            if not self.headers.get(TOKEN_HEADER):
                self.body()  # read, so the connection stays usable
                self.error(401, "UNAUTHORIZED", f"missing {TOKEN_HEADER} header")
                return True
        if REFUSE == "gone" and parts[:1] == ["command"]:
            self.body()
            self.error(404, "NOT_FOUND", f"no route {method} {path}")
            return True
        return False

    do_GET = lambda self: self.route("GET")  # noqa: E731
    do_POST = lambda self: self.route("POST")  # noqa: E731
    do_PUT = lambda self: self.route("PUT")  # noqa: E731
    do_DELETE = lambda self: self.route("DELETE")  # noqa: E731
    do_PATCH = lambda self: self.route("PATCH")  # noqa: E731

    # ---- commands
    def event(self, kind: str, **fields: object) -> None:
        frame = json.dumps({"type": kind, "timestamp": now_ms(), **fields}).encode() + b"\n\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
        self.wfile.flush()

    def run_command(self, body: dict) -> None:
        if not (body.get("command") or body.get("argv")):
            return self.error(400, "MISSING_QUERY", "command is empty")
        try:
            cmd = Command(body)
        except OSError as e:
            return self.error(400, "INVALID_REQUEST", f"cannot start command: {e}")
        COMMANDS[cmd.id] = cmd
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.event("init", text=cmd.id)
        if cmd.background:
            self.event("execution_complete", execution_time=0)
        else:
            self.stream(cmd)
        time.sleep(float(os.environ.get("EXECD_API_GRACE_SHUTDOWN") or 0))
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def stream(self, cmd: Command) -> None:
        lock = threading.Lock()

        def pump(pipe, kind: str) -> None:
            for line in iter(pipe.readline, b""):
                with lock:
                    self.event(kind, text=line.decode(errors="replace"))

        readers = [
            threading.Thread(target=pump, args=(cmd.proc.stdout, "stdout")),
            threading.Thread(target=pump, args=(cmd.proc.stderr, "stderr")),
        ]
        for r in readers:
            r.start()
        for r in readers:
            r.join()
        code = cmd.wait()
        if code == 0:
            self.event("execution_complete", execution_time=int((cmd.finished - cmd.started) * 1000))
        else:
            self.event("error", error={"ename": "CommandExecError", "evalue": str(code), "traceback": []})

    def logs(self, cmd_id: str, cursor: int) -> None:
        cmd = COMMANDS.get(cmd_id)
        if cmd is None or not cmd.background:
            return self.error(400, "INVALID_REQUEST", f"command not found or not in background: {cmd_id}")
        if cursor < 0:
            return self.error(400, "INVALID_REQUEST", "cursor cannot be negative")
        with open(cmd.log, "rb") as f:
            f.seek(min(cursor, os.fstat(f.fileno()).st_size))
            data = f.read()
            end = f.tell()
        self.reply(200, data, "text/plain; charset=utf-8", {"EXECD-COMMANDS-TAIL-CURSOR": str(end)})

    # ---- files
    def upload(self) -> None:
        head = f"Content-Type: {self.headers['Content-Type']}\r\n\r\n".encode()
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + self.body())
        meta: dict = {}
        for part in message.iter_parts():
            data = part.get_payload(decode=True) or b""
            if part.get_param("name", header="content-disposition") == "metadata":
                meta = json.loads(data)
                continue
            path = Path(meta["path"])
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            os.chmod(path, int(str(meta.get("mode") or 644), 8))
        self.reply(200)

    # ---- proxy
    def proxy(self, port: int, target: str) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
        try:
            conn.request(self.command, target, body=self.body(), headers=headers)
            answer = conn.getresponse()
        except OSError as e:
            conn.close()
            return self.error(502, "BAD_GATEWAY", f"127.0.0.1:{port}: {e}")
        try:  # relayed as it comes (a stream stays a stream), chunked
            self.send_response(answer.status)
            for k, v in answer.getheaders():
                if k.lower() not in HOP_HEADERS:
                    self.send_header(k, v)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            while chunk := answer.read1(65536):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        finally:
            conn.close()


def file_info(path: Path) -> dict:
    st = path.stat()
    return {
        "path": str(path),
        "size": st.st_size,
        "modified_at": rfc3339(st.st_mtime),
        "created_at": rfc3339(st.st_ctime),
        "owner": str(st.st_uid),
        "group": str(st.st_gid),
        "mode": int(oct(st.st_mode & 0o7777)[2:]),
        "type": "directory" if path.is_dir() else "file",
    }


class Server(ThreadingHTTPServer):
    # the listen backlog (socketserver's default is 5): execd (Go's net/http) listens with the
    # system's somaxconn, and the servers of one venv start their commands in one sandbox at once
    request_queue_size = 128


def main() -> None:
    server = Server(("0.0.0.0", PORT), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
