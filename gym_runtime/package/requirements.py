"""What a server asks to install: its ``requirements.txt`` or ``pyproject.toml``, line by line.

Every line is classified (plain requirement, URL, VCS, local path, editable, include, option) with
its 1-based line number, so errors can name ``requirements.txt`` line N (cases C01, C07, C11,
C16). :meth:`InstallSource.render` writes the file uv installs: the same number of lines (line N
stays line N), relative paths made absolute against the server directory (uv runs from a neutral
directory so a package's ``uv.toml`` cannot redirect the install), and every line pointing at the
Gym SDK replaced by the pinned ``nemo-gym`` with the line's extras (``nemo-gym[dev]==0.4.0``: what
Gym's checkout install puts in every venv, NeMo Gym 0.4.0 ``nemo_gym/cli/setup_command.py``). A
line points at the SDK when its local path is ``../..`` (the root of a Gym checkout, two levels
above the server directory; three above a nested implementation's, ``{server_type}/{group}/{impl}/``,
whose lines say ``../../../``: :func:`sdk_root`), whatever its spelling: ``-e nemo-gym[dev] @ ../../``, ``-e ../../``,
``../..``, ``-e ../../[dev]``, ``nemo-gym @ file:../..``; Gym's launcher, run from its wheel, drops
every requirements line containing ``../..`` and installs ``nemo-gym`` in its place
(``setup_env_command``, the non-editable variant). A bare ``nemo-gym[extras]`` requirement (a ``pyproject.toml``
server's) gets the same pin, so servers asking for the same SDK render the same file. ``pyproject.toml`` servers install ``[project].dependencies``
(never the server directory itself: it is on ``PYTHONPATH`` at run time); their
``[project].requires-python`` limits the interpreter the venv is built from.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from gym_runtime.errors import BuildError
from gym_runtime.package.layout import SERVER_TYPES

SDK_NAME = "nemo-gym"
_INCLUDE = ("-r", "--requirement", "-c", "--constraint")
_EDITABLE = ("-e", "--editable")
_VCS = ("git+", "hg+", "svn+", "bzr+")
_PATHLIKE = re.compile(r"^(\.{1,2}(/|$)|/|~|file:)")
_ARCHIVE = (".whl", ".tar.gz", ".zip", ".tar.bz2")
_BARE = re.compile(r"^[A-Za-z0-9._-]+\s*(\[[^\]]*\])?$")


@dataclass(frozen=True)
class ReqLine:
    """One logical line. ``kind``: ``requirement`` | ``url`` | ``vcs`` | ``path`` | ``editable`` |
    ``include`` | ``option``; ``name``: canonical distribution name when known; ``target``: the URL or
    path for url/vcs/path/editable/include lines; ``gym_sdk``: a line pointing at the Gym SDK
    (``../..`` in any spelling, see the module doc);
    ``extras``: the extras the line asks of the Gym SDK (``("dev",)``); ``error``: why the line is not
    a valid requirement (``None``: it is)."""

    lineno: int
    text: str
    kind: str
    name: str | None = None
    target: str | None = None
    hashes: tuple[str, ...] = ()
    gym_sdk: bool = False
    error: str | None = None
    extras: tuple[str, ...] = ()

    @property
    def needs_network_or_build(self) -> bool:
        return self.kind in ("url", "vcs", "path", "editable")

    @property
    def takes_sdk_pin(self) -> bool:
        """Gym's SDK line, or a bare ``nemo-gym[extras]`` requirement (no version, marker or URL):
        both become the pinned SDK (:meth:`InstallSource.render`)."""
        return self.gym_sdk or (
            self.kind == "requirement" and self.name == SDK_NAME and _BARE.match(self.text) is not None
        )

    def sdk_requirement(self, sdk: str) -> str:
        """``sdk`` (``nemo-gym==0.4.0`` or ``nemo-gym``) with this line's extras: ``nemo-gym[dev]==0.4.0``."""
        if not self.extras:
            return sdk
        return sdk.replace(SDK_NAME, f"{SDK_NAME}[{','.join(self.extras)}]", 1)


@dataclass(frozen=True)
class InstallSource:
    """A server's install file, parsed. ``kind`` is ``requirements`` or ``pyproject``;
    ``requires_python``: a pyproject's ``[project].requires-python`` (``None``: not declared)."""

    file: Path
    kind: str
    lines: tuple[ReqLine, ...]
    n_lines: int
    requires_python: SpecifierSet | None = None

    @property
    def uses_gym_sdk(self) -> bool:
        """True when the server references the Gym SDK (``nemo-gym`` or Gym's editable line)."""
        return any(ln.gym_sdk or ln.name == SDK_NAME for ln in self.lines)

    @property
    def has_hashes(self) -> bool:
        return any(ln.hashes for ln in self.lines)

    @property
    def names(self) -> set[str]:
        return {ln.name for ln in self.lines if ln.name}

    def line_of(self, name: str) -> ReqLine | None:
        """The line that requests distribution ``name`` (canonicalised), if any."""
        n = canonicalize_name(name)
        return next((ln for ln in self.lines if ln.name == n), None)

    def where(self, line: ReqLine) -> str:
        return (
            f"{self.file.name} line {line.lineno}"
            if self.kind == "requirements"
            else f"{self.file.name} [project].dependencies[{line.lineno - 1}]"
        )

    def render(self, sdk_replacement: str) -> str:
        """The text uv installs (same line numbers); ``sdk_replacement`` (``nemo-gym==0.4.0``), with
        the line's extras, replaces Gym's SDK line and a bare ``nemo-gym[extras]`` requirement."""
        out = [""] * self.n_lines
        base = self.file.parent
        for ln in self.lines:
            out[ln.lineno - 1] = _render_line(ln, base, sdk_replacement)
        return "\n".join(out) + "\n"


def _abs(target: str, base: Path) -> str:
    if target.startswith(("file:", "/")):
        return target
    return str((base / Path(target).expanduser()).resolve())


def _render_line(ln: ReqLine, base: Path, sdk: str) -> str:
    if ln.takes_sdk_pin:
        return ln.sdk_requirement(sdk)
    if ln.kind == "include":
        flag = ln.text.split(None, 1)[0].split("=", 1)[0]
        return f"{flag} {shlex.quote(_abs(ln.target or '', base))}"
    if ln.kind in ("path", "editable") and ln.target and not ln.target.startswith(_VCS):
        return ln.text.replace(ln.target, _abs(ln.target, base), 1)
    return ln.text


def logical_lines(text: str) -> list[tuple[int, str]]:
    """``(lineno, text)`` with comments stripped and ``\\`` continuations joined (pip's rules)."""
    out: list[tuple[int, str]] = []
    buf, start = "", 0
    for i, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if not buf:
            start = i
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        if buf.strip():
            out.append((start, buf.strip()))
        buf = ""
    if buf.strip():
        out.append((start, buf.strip()))
    return out


def local_path(target: str) -> str:
    """The filesystem path of a local path / editable target: ``file:`` prefix, ``#fragment`` and
    a trailing ``[extras]`` (``-e ../../[dev]``) removed."""
    path = target.split("#", 1)[0].strip()
    path = re.sub(r"\[[^\]]*\]$", "", path)
    return path.removeprefix("file://") if path.startswith("file:///") else path.removeprefix("file:")


def sdk_root(install_file: Path) -> str:
    """The Gym checkout root as seen from the server directory holding ``install_file``: ``../..``,
    one ``..`` more per level the implementation is nested (``responses_api_agents/a/b/`` ->
    ``../../..``: the levels up to the nearest directory named after a server type, and one more)."""
    types = set(SERVER_TYPES)  # every line's server types (a test holds them equal to known_server_types())
    for up, parent in enumerate(install_file.parent.parents, 1):
        if parent.name in types:
            return "/".join([".."] * (up + 1))
    return "../.."


def _is_sdk(target: str | None, root: str = "../..") -> bool:
    """True for a local target that is the Gym checkout root (``root``, in any spelling)."""
    if not target or target.startswith(_VCS + ("http:", "https:")):
        return False
    return posixpath.normpath(local_path(target)) == root


def classify(lineno: int, text: str, sdk_path: str = "../..") -> ReqLine:
    """Classify one logical requirements line (see :class:`ReqLine`); ``sdk_path``: the Gym checkout
    root relative to the server directory (:func:`sdk_root`)."""
    first, _, rest = text.partition(" ")
    flag = first.split("=", 1)[0]
    target: str | None
    if flag in _INCLUDE:
        target = first.split("=", 1)[1] if "=" in first else rest.strip()
        return ReqLine(lineno, text, "include", target=target)
    if flag in _EDITABLE:
        spec = first.split("=", 1)[1] if "=" in first else rest.strip()
        name, target, error = _name_and_target(spec)
        kind = "vcs" if (target or "").startswith(_VCS) else "editable"
        sdk = _is_sdk(target, sdk_path)
        return ReqLine(
            lineno,
            text,
            kind,
            name,
            target,
            gym_sdk=sdk,
            error=error,
            extras=_extras(spec) if sdk or name == SDK_NAME else (),
        )
    if text.startswith("-"):
        return ReqLine(lineno, text, "option")
    parts = text.split(" --hash")
    spec = parts[0].split(" --", 1)[0].strip()  # per-requirement options (--config-settings ...) follow it
    hashes = tuple(h.lstrip("=: ").strip() for h in parts[1:])
    name, target, error = _name_and_target(spec)
    if target is None:
        kind = "requirement"
    elif target.startswith(_VCS):
        kind = "vcs"
    elif target.startswith(("http://", "https://")):
        kind = "url"
    else:
        kind = "path"
    sdk = _is_sdk(target, sdk_path)
    return ReqLine(
        lineno,
        text,
        kind,
        name,
        target,
        hashes,
        gym_sdk=sdk,
        error=error,
        extras=_extras(spec) if sdk or name == SDK_NAME else (),
    )


def _extras(spec: str) -> tuple[str, ...]:
    """The extras of a requirement spec (``nemo-gym[dev] @ ../../`` -> ``("dev",)``), sorted."""
    m = re.match(r"^[^\[@;=<>!~ ]+\s*\[([^\]]*)\]", spec)
    return tuple(sorted({e.strip() for e in m.group(1).split(",") if e.strip()})) if m else ()


def _name_and_target(spec: str) -> tuple[str | None, str | None, str | None]:
    """``(canonical name | None, url-or-path | None, parse error | None)`` of a requirement spec."""
    if _PATHLIKE.match(spec) or (spec.endswith(_ARCHIVE) and "@" not in spec and "==" not in spec):
        return _name_from_path(spec), spec, None
    if "@" in spec and _PATHLIKE.match(spec.split("@", 1)[1].strip()):
        # Gym's `nemo-gym[dev] @ ../../` is not PEP 508 (a relative path is not a URL)
        head, target = spec.split("@", 1)
        name = re.sub(r"\[.*\]", "", head).strip()
        return canonicalize_name(name) if name else None, target.strip(), None
    try:
        req = Requirement(spec)
    except InvalidRequirement as e:
        if "://" in spec:
            return None, spec, None
        return None, None, str(e).splitlines()[0]
    return canonicalize_name(req.name), req.url, None


def _name_from_path(spec: str) -> str | None:
    base = spec.rstrip("/").rsplit("/", 1)[-1]
    m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._]*?)-\d", base)
    if m:
        return canonicalize_name(m.group(1))
    return None


def _requires_python(project: dict, path: Path, server: str) -> SpecifierSet | None:
    text = project.get("requires-python")
    if text is None:
        return None
    try:
        return SpecifierSet(str(text))
    except InvalidSpecifier as e:
        raise BuildError(
            f"{server}: {path} [project].requires-python {text!r} is not a version specifier",
            cause=str(e),
            hint="write it like `>=3.11`",
            code="GR-BUILD-INSTALL-FILE",
        ) from None


def read_install_source(path: Path, *, server: str) -> InstallSource:
    """Parse a server's ``requirements.txt`` or ``pyproject.toml``; raises :class:`BuildError`
    (code ``GR-BUILD-INSTALL-FILE``) for an unreadable file, a pyproject without static
    ``[project].dependencies`` or with a malformed ``requires-python``."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BuildError(f"{server}: cannot read {path}", cause=str(e), code="GR-BUILD-INSTALL-FILE") from None
    if path.name == "pyproject.toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise BuildError(
                f"{server}: {path} is not valid TOML", cause=str(e), code="GR-BUILD-INSTALL-FILE"
            ) from None
        project = data.get("project", {})
        if "dependencies" in project.get("dynamic", []):
            raise BuildError(
                f"{server}: {path} declares dynamic dependencies, which need a build to read",
                hint="list the dependencies statically under [project].dependencies",
                code="GR-BUILD-INSTALL-FILE",
            )
        deps = [str(d) for d in project.get("dependencies", [])]
        lines = tuple(classify(i, d, sdk_root(path)) for i, d in enumerate(deps, 1))
        return InstallSource(path, "pyproject", lines, len(deps), _requires_python(project, path, server))
    lines = tuple(classify(n, t, sdk_root(path)) for n, t in logical_lines(text))
    return InstallSource(path, "requirements", lines, max(len(text.splitlines()), 1))
