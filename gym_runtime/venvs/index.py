"""Read a package index (PEP 503 HTML or PEP 691 JSON; ``http(s)://`` or ``file://``).

Used to explain failures (which versions exist, case C09) and by ``vendor`` to fetch files.
Only the index uv itself would use is contacted (its honoured ``UV_INDEX_URL`` /
``UV_DEFAULT_INDEX``, else PyPI).
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import httpx
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename

PYPI = "https://pypi.org/simple"
_A = re.compile(r"<a\s+([^>]*)>([^<]*)</a>", re.I)
_ATTR = re.compile(r'([\w-]+)\s*=\s*"([^"]*)"')


@dataclass(frozen=True)
class IndexFile:
    """One file of a project page: name, absolute URL, sha256 (if given), yank reason (or None)."""

    filename: str
    url: str
    sha256: str | None
    yanked: str | None

    @property
    def version(self) -> str | None:
        try:
            if self.filename.endswith(".whl"):
                return str(parse_wheel_filename(self.filename)[1])
            return str(parse_sdist_filename(self.filename)[1])
        except ValueError:
            return None


def default_index(honoured: Mapping[str, str]) -> str:
    """The index stage 1 resolves against (first ``UV_INDEX_URL`` / ``UV_DEFAULT_INDEX``, else PyPI)."""
    return (honoured.get("UV_INDEX_URL") or honoured.get("UV_DEFAULT_INDEX") or PYPI).rstrip("/")


def _read(url: str, timeout_s: float) -> tuple[str, str]:
    if url.startswith("file:"):
        p = Path(unquote(urlparse(url).path))
        p = p / "index.html" if p.is_dir() else p
        return p.read_text(), "text/html"
    r = httpx.get(
        url,
        timeout=timeout_s,
        follow_redirects=True,
        headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.5"},
    )
    r.raise_for_status()
    return r.text, r.headers.get("content-type", "")


def project_files(index: str, name: str, timeout_s: float = 10.0) -> list[IndexFile]:
    """The files the index lists for ``name``; ``[]`` when the project is unknown or unreachable."""
    url = f"{index.rstrip('/')}/{canonicalize_name(name)}/"
    try:
        text, ctype = _read(url, timeout_s)
    except (OSError, httpx.HTTPError):
        return []
    if "json" in ctype:
        import json

        data = json.loads(text)
        return [
            IndexFile(
                f["filename"],
                urljoin(url, f["url"]),
                (f.get("hashes") or {}).get("sha256"),
                (f["yanked"] if isinstance(f.get("yanked"), str) else ("yanked" if f.get("yanked") else None)),
            )
            for f in data.get("files", [])
        ]
    out = []
    for attrs, label in _A.findall(text):
        a = dict(_ATTR.findall(attrs))
        href = html.unescape(a.get("href", ""))
        link, _, frag = href.partition("#")
        sha = frag.removeprefix("sha256=") if frag.startswith("sha256=") else None
        yanked = html.unescape(a["data-yanked"]) if "data-yanked" in a else None
        out.append(IndexFile(html.unescape(label).strip() or link.rsplit("/", 1)[-1], urljoin(url, link), sha, yanked))
    return out


def versions(index: str, name: str) -> list[str]:
    """Distinct versions the index has for ``name`` (sorted as listed)."""
    return list(dict.fromkeys(v for f in project_files(index, name) if (v := f.version)))
