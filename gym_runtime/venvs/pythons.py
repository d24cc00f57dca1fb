"""Find the interpreter a server venv is built from; never download one (case C17).

A request is a version (``3.13``, ``3.13.0``) or a path to an interpreter. Candidates, in order:
the runtime's own base interpreter, ``pythonX.Y`` / ``python3`` / ``python`` on ``PATH`` (pyenv
shims skipped: they follow ``.python-version`` files), ``$(pyenv root)/versions/*/bin``, and
uv-managed interpreters (``uv python dir``). Each candidate's exact version is read by running
it once; results are cached per resolved path, size and mtime for the life of the process.

Errors (code ``GR-BUILD-PYTHON``, stage ``python``): a request that is neither a version nor a
runnable interpreter path is invalid input (:class:`PythonRequestError`, exit 1); a well-formed
version this host does not have (case C17) is a :class:`~gym_runtime.errors.BuildError` (exit 3),
and so is an interpreter outside what the server needs (``requires``: the built-in servers' minimum,
a package server's ``requires-python``). When a minimum applies, the interpreters an error lists
as found are only those that satisfy it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import SpecifierSet

from gym_runtime.errors import EXIT_INVALID, BuildError, UserError

_PROBE = "import sys,platform;print(platform.python_implementation(), '.'.join(map(str, sys.version_info[:3])))"
_CACHE: dict[tuple[str, int, int], tuple[str, str] | None] = {}
_VERSION_RE = re.compile(r"^\d+(\.\d+){1,2}$")


class PythonRequestError(BuildError, UserError):
    """A Python request (``--python``, ``python_version``) that is a malformed version, a path that
    does not exist, or a file that is not a runnable interpreter: invalid input (exit 1)."""

    code = "GR-BUILD-PYTHON"
    exit_code = EXIT_INVALID


@dataclass(frozen=True)
class Interpreter:
    """A usable interpreter: resolved ``path``, ``implementation`` (``CPython``), exact ``version``
    (``3.13.0``) and ``source`` (``runtime`` | ``PATH`` | ``pyenv`` | ``uv-managed`` | ``path``)."""

    path: Path
    implementation: str
    version: str
    source: str

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])

    def describe(self) -> str:
        return f"{self.implementation} {self.version} at {self.path} ({self.source})"


def _own_base() -> Path | None:
    try:
        return Path(getattr(sys, "_base_executable", sys.executable)).resolve(strict=True)
    except OSError:
        return None


def probe(path: Path, source: str) -> Interpreter | None:
    """Run ``path`` once to read its implementation and version; ``None`` when it does not run.
    The runtime's own base interpreter is answered from this process (no process start)."""
    try:
        real = path.resolve(strict=True)
        st = real.stat()
    except OSError:
        return None
    key = (str(real), st.st_size, st.st_mtime_ns)
    if key not in _CACHE and real == _own_base():
        import platform

        _CACHE[key] = (platform.python_implementation(), ".".join(map(str, sys.version_info[:3])))
    if key not in _CACHE:
        try:
            out = subprocess.run(
                [str(real), "-I", "-c", _PROBE],
                capture_output=True,
                text=True,
                timeout=20,
                env={"PATH": "/usr/bin:/bin"},
            )
            parts = out.stdout.split()
            _CACHE[key] = (parts[0], parts[1]) if out.returncode == 0 and len(parts) == 2 else None
        except (OSError, subprocess.SubprocessError):
            _CACHE[key] = None
    got = _CACHE[key]
    return Interpreter(real, got[0], got[1], source) if got else None


def _home(environ: Mapping[str, str]) -> Path | None:
    """HOME, else the passwd entry's home; None when neither is known (a uid with no passwd entry,
    case C69): the paths derived from it are then skipped, not guessed."""
    if environ.get("HOME"):
        return Path(environ["HOME"])
    try:
        return Path.home()
    except RuntimeError:
        return None


def _listing(d: Path) -> list[Path]:
    """The entries of ``d``, newest name first; none when it is missing or unreadable (another
    user's pyenv root named by an inherited PYENV_ROOT, case C69)."""
    try:
        return sorted(d.iterdir(), reverse=True)
    except OSError:
        return []


def _pyenv_roots(environ: Mapping[str, str]) -> list[Path]:
    home = _home(environ)
    roots = [environ.get("PYENV_ROOT"), str(home / ".pyenv") if home else None]
    return [Path(r) for r in dict.fromkeys(r for r in roots if r)]


def _uv_python_dir(environ: Mapping[str, str]) -> Path | None:
    if environ.get("UV_PYTHON_INSTALL_DIR"):
        return Path(environ["UV_PYTHON_INSTALL_DIR"])
    home = _home(environ)
    data = environ.get("XDG_DATA_HOME") or (str(home / ".local" / "share") if home else None)
    return Path(data) / "uv" / "python" if data else None


def candidates(environ: Mapping[str, str], minor: str | None = None) -> list[tuple[Path, str]]:
    """Possible interpreters as ``(path, source)``, best first; ``minor`` (``3.13``) narrows by name."""
    out: list[tuple[Path, str]] = []
    base = Path(getattr(sys, "_base_executable", sys.executable))
    if minor is None or f"{sys.version_info[0]}.{sys.version_info[1]}" == minor:
        out.append((base, "runtime"))
    names = [f"python{minor}"] if minor else []
    names += ["python3", "python"] if minor is None else []
    for d in (environ.get("PATH") or "").split(os.pathsep):
        if not d or "/shims" in d or "/.pyenv/shims" in d:
            continue
        for n in names:
            out.append((Path(d) / n, "PATH"))
    for root in _pyenv_roots(environ):
        vdir = root / "versions"
        for v in _listing(vdir):
            if minor is None or v.name == minor or v.name.startswith(minor + "."):
                exe = next(
                    (
                        v / "bin" / n
                        for n in (f"python{minor}" if minor else "python3", "python3")
                        if (v / "bin" / n).exists()
                    ),
                    None,
                )
                if exe:
                    out.append((exe, "pyenv"))
    udir = _uv_python_dir(environ)
    if udir:
        for v in _listing(udir):
            if minor is None or f"-{minor}." in v.name:
                exe = v / "bin" / "python3"
                if exe.exists():
                    out.append((exe, "uv-managed"))
    return out


_NAMED = re.compile(r"(?:^|cpython-)(\d+\.\d+\.\d+)(?:$|[-+])")


_MINOR_NAME = re.compile(r"^python(\d+\.\d+)$")


def named_version(path: Path, source: str) -> str | None:
    """The version a pyenv or uv-managed interpreter's directory says it is (``versions/3.13.15``,
    ``cpython-3.13.15-linux-x86_64-gnu``), or None (PATH entries and paths say nothing)."""
    if source not in ("pyenv", "uv-managed") or len(path.parents) < 3:
        return None
    m = _NAMED.search(path.parent.parent.name)
    return m.group(1) if m else None


def _below_floor(path: Path, requires: SpecifierSet) -> bool:
    """True when ``path`` resolves to a ``pythonX.Y`` whose every release is below a lower bound
    of ``requires`` (``python3`` -> ``python3.11`` for ``>=3.13.14``): not worth a process start."""
    try:
        m = _MINOR_NAME.match(path.resolve().name)
    except OSError:
        return False
    return m is not None and any(
        s.operator in (">=", ">") and not s.contains(f"{m.group(1)}.999", prereleases=True) for s in requires
    )


def list_pythons(environ: Mapping[str, str], requires: SpecifierSet | None = None) -> list[Interpreter]:
    """Every distinct interpreter found (by resolved path), for error messages and ``doctor``;
    with ``requires``, only those that satisfy it, and a pyenv or uv-managed interpreter whose
    directory names a version outside it is not even run (each probe is a process start)."""
    seen: dict[Path, Interpreter] = {}
    for path, source in candidates(environ):
        if requires is not None:
            named = named_version(path, source)
            if named is not None and not requires.contains(named, prereleases=True) or _below_floor(path, requires):
                continue
        it = probe(path, source)
        if it and it.path not in seen and (requires is None or requires.contains(it.version, prereleases=True)):
            seen[it.path] = it
    return sorted(seen.values(), key=lambda i: tuple(int(x) for x in i.version.split(".")))


def _matches(version: str, request: str) -> bool:
    return version == request or version.startswith(request + ".")


def _looks_like_path(req: str) -> bool:
    return "/" in req or req.startswith(("~", "."))


def find_python(
    request: str,
    environ: Mapping[str, str],
    *,
    server: str = "",
    origin: str = "",
    requires: SpecifierSet | None = None,
    requires_why: str = "",
    fix: str = "",
) -> Interpreter:
    """The interpreter for ``request`` (version or path), which must satisfy ``requires`` (the
    Python versions the server runs on; ``requires_why`` says who needs them, for the message;
    ``fix`` replaces the hint's generic advice).

    Raises ``GR-BUILD-PYTHON`` naming the server, the request, where it was set (``origin``) and
    the interpreters found on this host that would work: :class:`PythonRequestError` (exit 1) for
    a malformed version, a missing path or a file that is no interpreter; :class:`BuildError`
    (exit 3) for a version this host does not have (case C17) or one outside ``requires``.
    """
    req = request.strip()
    need = (requires, requires_why)
    it: Interpreter | None = None
    if not _VERSION_RE.match(req):
        p = Path(req).expanduser()
        if not _looks_like_path(req) and not p.exists():
            _raise(
                server,
                req,
                origin,
                environ,
                f"{req!r} is neither a Python version (like 3.13) nor a path to an interpreter",
                PythonRequestError,
                need,
                fix,
            )
        if not p.exists():
            _raise(server, req, origin, environ, f"{req} does not exist", PythonRequestError, need, fix)
        it = probe(p, "path")
        if it is None:
            _raise(
                server,
                req,
                origin,
                environ,
                f"{req} is not a runnable Python interpreter",
                PythonRequestError,
                need,
                fix,
            )
    else:
        minor = ".".join(req.split(".")[:2])
        # a request like 3.13 takes the first 3.13.x that fits the server (3.13.15 over a 3.13.0 found first)
        first = None
        for path, source in candidates(environ, minor):
            if (i := probe(path, source)) and _matches(i.version, req):
                first = first or i
                if requires is None or requires.contains(i.version, prereleases=True):
                    it = i
                    break
        if first is None:
            _raise(server, req, origin, environ, f"Python {req} is not available on this host", BuildError, need, fix)
        it = it or first
    assert it is not None
    if requires is not None and not requires.contains(it.version, prereleases=True):
        _raise(
            server,
            req,
            origin,
            environ,
            f"that is {it.implementation} {it.version}, but {requires_why} needs Python {requires}",
            BuildError,
            need,
            fix,
        )
    return it


def pick_python(
    requires: SpecifierSet, environ: Mapping[str, str], *, server: str = "", requires_why: str = "", fix: str = ""
) -> Interpreter:
    """An interpreter of this host that satisfies ``requires``, for a server whose Python nobody
    asked for: the oldest minor version that has one, at its newest patch (``3.13.18`` over
    ``3.13.15`` and over ``3.14.1``; docs/runtime.md "Venvs": a dependency closure has wheels for
    the older minor first, and the newest patch has its fixes). The same host gives every server
    the same answer, so servers sharing one Ray head run one Python. Raises ``GR-BUILD-PYTHON``
    (:class:`BuildError`) naming the server, ``requires_why`` and every interpreter found when none fits."""
    fits = list_pythons(environ, requires)
    if not fits:
        found = ", ".join(f"{i.version} ({i.path})" for i in list_pythons(environ)) or "none"
        raise BuildError(
            f"{server + ': ' if server else ''}no Python on this host meets {requires_why}: it needs "
            f"Python {requires}; found: {found}",
            hint=fix or "install such an interpreter on the host (gym-runtime never downloads Python)",
            code="GR-BUILD-PYTHON",
            extra={
                "server": server,
                "stage": "python",
                "requires_python": str(requires),
                "found": [i.version for i in list_pythons(environ)],
            },
        )

    def key(i: Interpreter) -> tuple[int, ...]:
        major, minor, *patch = (int(x) for x in i.version.split("."))
        return (major, minor, *(-p for p in patch))

    return min(fits, key=key)


def _raise(
    server: str,
    req: str,
    origin: str,
    environ: Mapping[str, str],
    what: str,
    error: type[BuildError],
    need: tuple[SpecifierSet | None, str],
    fix: str = "",
) -> None:
    requires, why = need
    found = [i for i in list_pythons(environ) if requires is None or requires.contains(i.version, prereleases=True)]
    listing = ", ".join(f"{i.version} ({i.path})" for i in found) or "(none)"
    where = f" (set in {origin})" if origin else ""
    found_what = "found" if requires is None else f"found that would work (Python {requires}):"
    hint = (
        "give a version such as 3.13 or the path of a Python executable; " if error is PythonRequestError else ""
    ) + (
        fix
        or "use one of the versions found, or install the interpreter on the host (gym-runtime never downloads Python)"
    )
    extra = {"server": server, "stage": "python", "requested": req, "found": [i.version for i in found]}
    if requires is not None:
        extra["requires_python"] = str(requires)
    raise error(
        f"{server + ': ' if server else ''}python {req}{where}: {what}; {found_what} {listing}",
        hint=hint,
        code="GR-BUILD-PYTHON",
        extra=extra,
    )
