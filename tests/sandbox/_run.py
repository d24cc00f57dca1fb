"""Run a stdlib script inside a real Sandbox and collect its JSON output (shared by the sandbox tests)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from sandbox import ProcessSpec, Sandbox

APPS = Path(__file__).parent / "apps"


async def run_json(
    sb: Sandbox,
    python: Path,
    script: str,
    spec: dict,
    work: Path,
    extra_ro: list[Path] = (),
    env: dict | None = None,
    name: str = "client",
    timeout: float = 180,
) -> dict:
    """Spawn ``python apps/<script> spec.json`` in ``sb``; return its JSON stdout (raise with stderr on failure)."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "spec.json").write_text(json.dumps(spec))
    out, err = work / f"{name}.out", work / f"{name}.err"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = sb.spawn(
            ProcessSpec(
                name,
                [str(python), str(APPS / script), str(work / "spec.json")],
                work,
                {"PATH": "/usr/bin:/bin", "HOME": str(work), **(env or {})},
                read_only_paths=[python.parent.parent, APPS, *extra_ro],
                writable_paths=[work],
                stdout_fd=fo.fileno(),
                stderr_fd=fe.fileno(),
            )
        )
    rc = await asyncio.wait_for(proc.wait(), timeout)
    if rc != 0:
        raise AssertionError(f"{script} exited {rc}: {err.read_text()[-2000:]}")
    return json.loads(out.read_text())


def guard_dns(monkeypatch) -> list[str]:
    """Make any real DNS lookup in this process fail loudly and record it (IP literals pass)."""
    import socket

    from sandbox.policy import parse_ip_literal

    seen: list[str] = []
    real = socket.getaddrinfo

    def guarded(host, *a, **kw):
        if host is not None and not (isinstance(host, str) and (parse_ip_literal(host) or host == "localhost")):
            seen.append(host)
            raise OSError(f"real DNS lookup attempted for {host!r} in a sandbox test")
        return real(host, *a, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", guarded)
    return seen
