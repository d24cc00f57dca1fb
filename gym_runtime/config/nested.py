"""Nested ``config_paths``: the include tree of a package's configs, in the order its Gym release merges it.

Each file listed in the manifest's ``config_paths`` may list more files under its own top-level
``config_paths``, and so on (NeMo Gym ``nemo_gym/global_config.py``, ``load_extra_config_paths``).
Entries are collected breadth-first: a file already collected is not read again (two bundles
that pull in the same resources-server config share it). The merge order is the release's
(:attr:`~gym_runtime.gym_release.GymRelease.includer_wins`, docs/environment-packages.md
"Composition"):

* 0.2-0.5: files in the order they were collected, so a file pulled in overrides the file that
  named it;
* 0.6 and later: the include tree in post-order (a file after everything it pulled in, siblings
  in listed order), so a file overrides what it pulled in, however deep.

Lookup roots, for an entry of a nested ``config_paths``: the package root first; then, for a
wheels package that vendors ``nemo_gym``, that wheel's own files (Gym's install root, where the
wheel's trees and ``benchmarks/`` live), read from the wheel without unpacking it. A native-v1
package reaches only its own files. An entry found nowhere is retried under the new name the
release gives a renamed config (:attr:`~gym_runtime.gym_release.GymRelease.config_path_aliases`,
warning ``GR-CONFIG-LEGACY-PATH``). Entries follow the manifest's path rules (relative POSIX paths,
no ``.``/``..``, no symlinks, inside the package).

Errors, each naming the including file and its ``config_paths[i]`` key: ``GR-CONFIG-NESTED-MISSING``
(found in no root), ``GR-CONFIG-NESTED-PATH`` (not a relative path inside the package, or
``config_paths`` not a list of strings), ``GR-CONFIG-NESTED-CYCLE`` (a file that pulls in itself,
directly or through others: its precedence would depend on which file is listed first).
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gym_runtime.config.merge import load_layer, load_text_layer
from gym_runtime.errors import Violation, ViolationList
from gym_runtime.package.layout import is_link, is_regular_file

if TYPE_CHECKING:
    from gym_runtime.gym_release import GymRelease
    from gym_runtime.package import Package, WheelFile


@dataclass
class ConfigFile:
    """One collected config: ``entry`` (its ``config_paths`` text, renamed when an alias applied),
    ``label`` (where it was read: the package-relative path, or ``<entry> (in wheels/<file>)``),
    its plain ``data``, the indexes of the files it pulled in, and the index of the file that first
    named it (None for a manifest entry)."""

    entry: str
    label: str
    data: dict[str, Any]
    children: list[int] = field(default_factory=list)
    parent: int | None = None


@dataclass(frozen=True)
class IncludeTree:
    """Every collected config (``files``, in collection order) and ``order``: the indexes in merge
    order (lowest priority first). ``nested`` is True when any file has a ``config_paths`` key."""

    files: list[ConfigFile]
    order: list[int]
    nested: bool

    @property
    def entries(self) -> list[str]:
        """Every collected entry, in collection order (what Gym stores as the final ``config_paths``)."""
        return [f.entry for f in self.files]

    def layers(self) -> list[tuple[dict[str, Any], str]]:
        """``(data, label)`` per file, in merge order."""
        return [(self.files[i].data, self.files[i].label) for i in self.order]


class _Roots:
    """Where a nested entry is looked up: the package root, then a vendored ``nemo_gym`` wheel."""

    def __init__(self, package: Package) -> None:
        from gym_runtime.gym_release.choose import vendored_sdk

        self.root = package.root
        self.wheel: WheelFile | None = vendored_sdk(package) if package.wheels_dir is not None else None
        self._members: set[str] | None = None

    def describe(self) -> str:
        return "the package" + (f" or wheels/{self.wheel.filename}" if self.wheel else "")

    def find(self, entry: str, v: ViolationList, where: dict[str, str]) -> tuple[str, dict[str, Any] | None] | None:
        """``(label, data)`` of ``entry`` from the first root that holds it; None when none does.
        A file that exists but cannot be used adds its violation and gives ``(label, None)``."""
        path = self.root / entry
        chain = [self.root.joinpath(*entry.split("/")[: n + 1]) for n in range(entry.count("/") + 1)]
        if any(is_link(c) for c in chain):
            v.add(
                "GR-CONFIG-NESTED-PATH",
                f"names {entry}, which is (or is reached through) a symlink",
                **where,
                hint="copy the file into the package",
            )
            return entry, None
        if is_regular_file(path):
            return entry, load_layer(path, entry, v)
        if self.wheel is not None and entry in self._wheel_members():
            label = f"{entry} (in wheels/{self.wheel.filename})"
            with zipfile.ZipFile(self.wheel.path) as z:
                return label, load_text_layer(z.read(entry), label, v)
        return None

    def _wheel_members(self) -> set[str]:
        if self._members is None:
            try:
                with zipfile.ZipFile(self.wheel.path) as z:  # type: ignore[union-attr]  # only files read from a wheel get here, and they have one
                    self._members = {n for n in z.namelist() if n.endswith((".yaml", ".yml"))}
            except (OSError, zipfile.BadZipFile):
                self._members = set()
        return self._members


def _path_problem(entry: Any) -> str | None:
    """Why ``entry`` is not a relative POSIX path inside the package (the manifest's rules), or None."""
    if not isinstance(entry, str) or not entry:
        return f"is {entry!r}, not a path"
    if "\\" in entry or any(ord(c) < 0x20 or ord(c) == 0x7F for c in entry) or len(entry) > 1024:
        return f"names {ascii(entry)[:80]}, which is not a POSIX path ('/' separators, no control characters)"
    if entry.startswith("/"):
        return f"names {entry}, an absolute path; entries are relative to the package root"
    if any(seg in (".", "..", "") for seg in entry.split("/")):
        return f"names {entry}, which has '.', '..' or empty segments"
    return None


def _ancestors(files: list[ConfigFile], index: int) -> list[int]:
    out = [index]
    while files[out[-1]].parent is not None:
        out.append(files[out[-1]].parent)  # type: ignore[arg-type]  # the loop condition checked parent
    return out


def collect(package: Package, release: GymRelease, v: ViolationList, warnings: list[Violation]) -> IncludeTree:
    """The include tree of ``package``'s configs (module doc); problems are added to ``v`` (errors)
    and ``warnings``. Manifest entries are the package stage's files (already checked)."""
    roots = _Roots(package)
    files: list[ConfigFile] = []
    for path in package.config_files:
        label = package.rel(path)
        data = load_layer(path, label, v)
        files.append(ConfigFile(label, label, data if data is not None else {}))
    nested = False
    index = 0
    while index < len(files):  # files grows while it is walked: breadth-first
        current = files[index]
        listed = current.data.get("config_paths")
        if "config_paths" in current.data:
            nested = True
        if listed is not None and not isinstance(listed, list):
            v.add(
                "GR-CONFIG-NESTED-PATH",
                f"config_paths must be a list of paths, got a {type(listed).__name__}",
                file=current.label,
                key="config_paths",
                hint="write config_paths: [path/one.yaml, path/two.yaml]",
            )
            listed = []
        for i, entry in enumerate(listed or []):
            where = {"file": current.label, "key": f"config_paths[{i}]"}
            problem = _path_problem(entry)
            if problem:
                v.add("GR-CONFIG-NESTED-PATH", problem, **where, hint="write a path relative to the package root")
                continue
            known = {f.entry: n for n, f in enumerate(files)}
            if entry in known:
                if known[entry] in _ancestors(files, index):
                    chain = " -> ".join(files[n].label for n in reversed(_ancestors(files, index)))
                    v.add(
                        "GR-CONFIG-NESTED-CYCLE",
                        f"names {entry}, which pulls in this file again ({chain} -> {entry})",
                        **where,
                        hint="remove one of the entries: which file overrides which is undefined in a cycle",
                    )
                continue  # a file two others pull in is read once
            found = _find(roots, entry, release, v, where, warnings)
            if found is None:
                continue
            name, label, data = found
            if name in known:
                continue
            files.append(ConfigFile(name, label, data if data is not None else {}, parent=index))
            current.children.append(len(files) - 1)
        index += 1
    return IncludeTree(files, _merge_order(files, package, release), nested)


def _find(
    roots: _Roots, entry: str, release: GymRelease, v: ViolationList, where: dict[str, str], warnings: list[Violation]
) -> tuple[str, str, dict[str, Any] | None] | None:
    """``(entry as used, label, data)`` for a nested entry, trying the release's new name for a
    renamed config; None (with a violation) when found nowhere."""
    hit = roots.find(entry, v, where)
    if hit is not None:
        return entry, *hit
    renamed = release.config_path_aliases.get(entry)
    hit = roots.find(renamed, v, where) if renamed else None
    if hit is not None and renamed:
        warnings.append(
            Violation(
                "GR-CONFIG-LEGACY-PATH",
                f"names {entry}, which NeMo Gym {release.version} calls {renamed}; {renamed} was used",
                **where,
                hint=f"write {renamed}",
            )
        )
        return renamed, *hit
    v.add(
        "GR-CONFIG-NESTED-MISSING",
        f"names {entry}, which is not in {roots.describe()}",
        **where,
        hint="add the file to the package at that path (relative to the package root), or fix the entry"
        + (
            ""
            if roots.wheel
            else "; a native-v1 package reaches only its own files, a wheels-v1 package that "
            "vendors nemo_gym also reaches the files of that wheel"
        ),
    )
    return None


def _merge_order(files: list[ConfigFile], package: Package, release: GymRelease) -> list[int]:
    """Indexes in merge order: collection order (0.2-0.5), or the include tree in post-order with
    the manifest's entries as roots (0.6 and later: a file after what it pulled in)."""
    if not release.includer_wins:
        return list(range(len(files)))
    out: list[int] = []

    def visit(i: int) -> None:
        for child in files[i].children:
            visit(child)
        out.append(i)

    for root in range(len(package.config_files)):
        visit(root)
    return out
