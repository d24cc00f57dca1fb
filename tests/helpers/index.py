"""Package indexes for tests: a PEP 503 simple index as static files (``file://``) or over HTTP
on loopback.

Both serve the distribution files found in one flat directory (tiny wheels and sdists from
:mod:`tests.helpers.wheels`), grouped by normalised project name, with ``#sha256=`` fragments and
PEP 592 ``data-yanked`` attributes::

    from tests.helpers.index import SimpleIndex, write_simple_index
    url = write_simple_index(files_dir, tmp_path / "index", yanked={"futurelib-3.1.1-py3-none-any.whl": "bad"})
    # url == "file:///.../index"  (pass as --index-url / UV_INDEX_URL)
    with SimpleIndex(files_dir, yanked=...) as idx:   # idx.url == "http://127.0.0.1:<port>/simple"
        ...; idx.requests  # the paths requested so far (to assert what was or was not fetched)

The HTTP server binds 127.0.0.1 only and runs in a daemon thread; leaving the ``with`` block
shuts it down. An empty ``files_dir`` makes an empty index (every lookup is a 404).
"""

from __future__ import annotations

import hashlib
import html
import sys
import threading
from collections import defaultdict
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename


def _project(filename: str) -> str | None:
    try:
        if filename.endswith(".whl"):
            return canonicalize_name(parse_wheel_filename(filename)[0])
        if filename.endswith((".tar.gz", ".zip")):
            return canonicalize_name(parse_sdist_filename(filename)[0])
    except ValueError:
        return None
    return None


def _page(title: str, links: list[str]) -> str:
    body = "\n".join(links)
    return (
        f'<!DOCTYPE html>\n<html><head><meta name="pypi:repository-version" content="1.0">'
        f"<title>{html.escape(title)}</title></head>\n<body>\n{body}\n</body></html>\n"
    )


def render_index(files_dir: Path, href_prefix: str, yanked: dict[str, str] | None = None) -> dict[str, str]:
    """The index pages: ``{"": root page, "<project>": project page}``.

    File links point at ``href_prefix + filename`` (a relative or absolute URL prefix).
    ``yanked`` maps file names to yank reasons.
    """
    yanked = yanked or {}
    by_project: dict[str, list[Path]] = defaultdict(list)
    files = sorted(Path(files_dir).iterdir()) if Path(files_dir).is_dir() else []
    for f in files:
        proj = _project(f.name)
        if proj and f.is_file():
            by_project[proj].append(f)
    pages = {"": _page("Simple index", [f'<a href="{p}/">{p}</a><br>' for p in sorted(by_project)])}
    for proj, paths in by_project.items():
        links = []
        for f in paths:
            digest = hashlib.sha256(f.read_bytes()).hexdigest()
            attr = f' data-yanked="{html.escape(yanked[f.name])}"' if f.name in yanked else ""
            links.append(f'<a href="{href_prefix}{f.name}#sha256={digest}"{attr}>{f.name}</a><br>')
        pages[proj] = _page(f"Links for {proj}", links)
    return pages


def write_simple_index(files_dir: Path, index_dir: Path, yanked: dict[str, str] | None = None) -> str:
    """Write a static simple index for ``files_dir`` under ``index_dir``; return its ``file://`` URL.

    Pages are ``index_dir/index.html`` and ``index_dir/<project>/index.html``; links are absolute
    ``file://`` URLs of the files in ``files_dir``.
    """
    index_dir = Path(index_dir)
    index_dir.mkdir(parents=True, exist_ok=True)
    prefix = Path(files_dir).resolve().as_uri() + "/"
    for proj, text in render_index(files_dir, prefix, yanked).items():
        d = index_dir / proj if proj else index_dir
        d.mkdir(parents=True, exist_ok=True)
        (d / "index.html").write_text(text)
    return index_dir.resolve().as_uri()


class _QuietServer(ThreadingHTTPServer):
    """Says nothing when a client hangs up mid-request (a build the test interrupts): the default
    prints a traceback to whatever ``sys.stderr`` is then, another test's captured output."""

    def handle_error(self, request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class SimpleIndex:
    """A real simple index over HTTP on ``127.0.0.1`` (random port) for the files in ``files_dir``.

    ``url`` is the index URL (``.../simple``); files are served under ``/files/``. Pages are
    rendered per request, so files added to ``files_dir`` later show up. ``requests`` records
    every requested path. ``delay_s`` delays each file download (to interrupt a build mid-way);
    :meth:`hold` keeps every file download waiting until :meth:`release` (a build that stays
    under way while a test acts, however slow or fast the host; uv waits up to its
    ``UV_HTTP_TIMEOUT``, 30 s unless set).
    """

    def __init__(self, files_dir: Path, yanked: dict[str, str] | None = None, delay_s: float = 0.0) -> None:
        self.files_dir = Path(files_dir)
        self.yanked = dict(yanked or {})
        self.delay_s = delay_s
        self.requests: list[str] = []
        self._closing = threading.Event()  # wakes delayed downloads when the index closes
        self._open = threading.Event()  # cleared by hold(): file downloads wait for release()
        self._open.set()
        owner = self

        class Handler(SimpleHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                owner.requests.append(self.path)
                path = self.path.split("?", 1)[0]
                if path.startswith("/files/"):
                    while not owner._open.wait(0.05):
                        if owner._closing.is_set():
                            return None
                    if owner._closing.wait(owner.delay_s):
                        return None  # closed while the download was held back: nothing more to send
                    f = owner.files_dir / path.removeprefix("/files/")
                    return (
                        self._send(f.read_bytes(), "application/octet-stream") if f.is_file() else self.send_error(404)
                    )
                if not path.startswith("/simple"):
                    return self.send_error(404)
                proj = path.removeprefix("/simple").strip("/")
                pages = render_index(owner.files_dir, "/files/", owner.yanked)
                key = canonicalize_name(proj) if proj else ""
                if key not in pages:
                    return self.send_error(404)
                self._send(pages[key].encode(), "text/html")

            def _send(self, data: bytes, ctype: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/simple"

    def hold(self) -> None:
        """From now on every file download waits until :meth:`release` (or the index closes)."""
        self._open.clear()

    def release(self) -> None:
        """Let the held downloads (and later ones) through."""
        self._open.set()

    def __enter__(self) -> SimpleIndex:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
