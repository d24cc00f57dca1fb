"""``./uvw`` behind a TLS-inspecting proxy: the proxy's CA given by ``SSL_CERT_FILE``,
``REQUESTS_CA_BUNDLE``, ``PIP_CERT`` or the system's store reaches both the pip fetch of uv and
every uv call after it (the script's header says how).

On loopback: an HTTPS package index at ``https://localhost:<port>/simple`` whose certificate a CA
made by the test signed (openssl, tests/helpers/egress_targets.py), standing for the proxy that
re-signs every host. It serves the uv wheel (rebuilt from the uv this project's venv installed:
the real binary) and a tiny wheel. A copy of ``./uvw`` with no uv on its ``PATH`` fetches uv with
the real pip (``PIP_INDEX_URL``) and then ``uv pip install``s the tiny wheel (``UV_INDEX_URL``)
into a venv. Without the CA neither works (the control); the system's store is stood for by a
bundle with the CA added, bound over the system's bundle in a private mount namespace.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import os
import shutil
import ssl
import subprocess
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.helpers.egress_targets import _Handler, make_ca
from tests.helpers.packages import write_wheel

ROOT = Path(__file__).resolve().parents[1]
SYSTEM_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def _python_with_pip() -> str | None:
    for cand in (shutil.which("python3"), "/usr/bin/python3"):
        if cand and subprocess.run([cand, "-m", "pip", "--version"], capture_output=True).returncode == 0:
            return cand
    return None


def uv_wheel(out: Path) -> Path:
    """The installed uv distribution (this venv's, the real binary) as a wheel again: its files by
    its RECORD, ``bin/`` under ``.data/scripts``, named by the tags its WHEEL file gives."""
    dist = importlib.metadata.distribution("uv")
    name = f"uv-{dist.version}"
    wheel_meta = (dist.read_text("WHEEL") or "").splitlines()
    tag = next(line.split(": ", 1)[1] for line in wheel_meta if line.startswith("Tag: "))
    path = out / f"{name}-{tag}.whl"
    out.mkdir(parents=True, exist_ok=True)
    record = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for f in dist.files or []:
            parts = f.parts
            if parts[-1] in ("RECORD", "INSTALLER", "REQUESTED") and parts[0].endswith(".dist-info"):
                continue
            arc = f"{name}.data/scripts/{parts[-1]}" if parts[0] == ".." else f.as_posix()
            data = Path(str(dist.locate_file(f))).read_bytes()
            zi = zipfile.ZipInfo(arc, (2020, 1, 1, 0, 0, 0))
            zi.external_attr = 0o100755 << 16  # a regular file, executable (pip keeps the bit)
            z.writestr(zi, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{arc},sha256={digest},{len(data)}")
        record.append(f"{name}.dist-info/RECORD,,")
        z.writestr(f"{name}.dist-info/RECORD", "\n".join(record) + "\n")
    return path


@dataclass
class Index:
    url: str
    ca: Path
    server: ThreadingHTTPServer


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    d = tmp_path_factory.mktemp("uvw-index")
    wheels = d / "wheels"
    uv_wheel(wheels)
    write_wheel(wheels, "uvwcertprobe-1.0-py3-none-any.whl")
    ca, cert, key = make_ca(d / "tls", ["localhost"])
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("H", (_Handler,), {"wheels": wheels}))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield Index(f"https://localhost:{server.server_address[1]}/simple", ca, server)
    finally:
        server.shutdown()
        server.server_close()


def run_uvw(index: Index, tmp: Path, ca_env: dict[str, str], system_bundle: Path | None = None) -> dict[str, str]:
    """A fresh copy of ``./uvw`` (no ``.uv-bootstrap`` yet) fetching uv from ``index``, then making a
    venv and installing ``uvwcertprobe`` from it with ``uv pip install``. Returns each step's
    output, ``fetch`` and ``install``, with ``"ok"`` or the failure's words."""
    python = _python_with_pip()
    if python is None:
        pytest.skip("no python3 with pip here: the fetch of uv cannot run")
    proj = tmp / "proj"
    proj.mkdir()
    shutil.copy2(ROOT / "uvw", proj / "uvw")
    bindir = tmp / "bin"
    bindir.mkdir()
    (bindir / "python3").symlink_to(python)
    env = {
        "PATH": f"{bindir}:/usr/bin:/bin",
        "HOME": str(tmp / "home"),
        "PIP_INDEX_URL": index.url,
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_NO_CACHE_DIR": "1",
        "UV_INDEX_URL": index.url,
        "UV_CACHE_DIR": str(tmp / "uv-cache"),
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_NO_CONFIG": "1",
        **ca_env,
    }
    script = (
        './uvw --version >fetch.log 2>&1 || { cat fetch.log; echo "FETCH FAILED"; exit 0; }\n'
        f"./uvw venv -q --python {python} v >/dev/null 2>&1\n"
        "./uvw pip install -q --python v/bin/python uvwcertprobe >install.log 2>&1 "
        '|| { cat install.log; echo "INSTALL FAILED"; exit 0; }\n'
        "v/bin/python -c 'import uvwcertprobe' && echo INSTALLED\n"
    )
    argv = ["sh", "-c", script]
    if system_bundle is not None:  # the system's store with the proxy's CA, in a private mount namespace
        argv = [
            "unshare",
            "-rm",
            "sh",
            "-c",
            f'mount --bind "$0" {SYSTEM_BUNDLE} && exec sh -c "$1"',
            str(system_bundle),
            script,
        ]
    done = subprocess.run(argv, cwd=proj, env=env, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    fetched = (proj / ".uv-bootstrap" / "bin" / "uv").is_file()
    return {
        "fetch": "ok" if fetched and "FETCH FAILED" not in out else out,
        "install": "ok" if "INSTALLED" in out else out,
    }


@pytest.mark.parametrize("variable", ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT"])
def test_the_proxys_ca_by_any_usual_variable_reaches_the_fetch_and_uv(index: Index, tmp_path: Path, variable) -> None:
    assert run_uvw(index, tmp_path, {variable: str(index.ca)}) == {"fetch": "ok", "install": "ok"}


def test_the_proxys_ca_in_the_system_store_reaches_the_fetch_and_uv(index: Index, tmp_path: Path) -> None:
    if not SYSTEM_BUNDLE.is_file() or subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode:
        pytest.skip(f"needs {SYSTEM_BUNDLE} and a user namespace to bind a bundle over it")
    bundle = tmp_path / "system-with-proxy-ca.crt"
    bundle.write_bytes(SYSTEM_BUNDLE.read_bytes() + b"\n" + index.ca.read_bytes())
    (tmp_path / "run").mkdir()
    assert run_uvw(index, tmp_path / "run", {}, system_bundle=bundle) == {"fetch": "ok", "install": "ok"}


def test_without_the_proxys_ca_the_fetch_fails_on_the_certificate(index: Index, tmp_path: Path) -> None:
    found = run_uvw(index, tmp_path, {})
    assert "CERTIFICATE_VERIFY_FAILED" in found["fetch"] or "certificate verify failed" in found["fetch"], found


@pytest.mark.parametrize(("version", "expected"), [("0.12.4", "UV_NATIVE_TLS=1"), ("0.13.9", "UV_SYSTEM_CERTS=1")])
def test_the_system_store_is_asked_for_by_the_name_the_uvs_version_reads(tmp_path: Path, version, expected) -> None:
    """uv before 0.13 ignores ``UV_SYSTEM_CERTS`` and reads ``UV_NATIVE_TLS``. A stand-in uv that says
    its version and prints what it was given, where ``./uvw`` keeps the uv it fetched."""
    if not SYSTEM_BUNDLE.is_file():
        pytest.skip(f"needs a system CA bundle at {SYSTEM_BUNDLE}")
    shutil.copy2(ROOT / "uvw", tmp_path / "uvw")
    fake = tmp_path / ".uv-bootstrap" / "bin" / "uv"
    fake.parent.mkdir(parents=True)
    fake.write_text(
        f'#!/bin/sh\n[ "$1" = --version ] && {{ echo "uv {version} (x86_64-unknown-linux-gnu)"; exit 0; }}\n'
        'echo "UV_NATIVE_TLS=${UV_NATIVE_TLS:-} UV_SYSTEM_CERTS=${UV_SYSTEM_CERTS:-} SSL_CERT_FILE=${SSL_CERT_FILE:-}"\n'
    )
    fake.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    said = subprocess.run([str(tmp_path / "uvw"), "env"], env=env, capture_output=True, text=True, check=True).stdout
    names = dict(part.split("=", 1) for part in said.split())
    assert {k: v for k, v in names.items() if v} == dict([expected.split("=")]), said
    # a variable the caller set is left alone
    said = subprocess.run(
        [str(tmp_path / "uvw"), "env"], env={**env, "UV_NATIVE_TLS": "true"}, capture_output=True, text=True
    ).stdout
    assert said.split() == ["UV_NATIVE_TLS=true", "UV_SYSTEM_CERTS=", "SSL_CERT_FILE="]
