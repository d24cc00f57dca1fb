"""pip's index settings, which uv ignores: where a build or ``doctor`` must say so.

uv reads none of pip's configuration (uv's documentation, "Compatibility with pip": no
``PIP_*`` variable and no ``pip.conf``), and the runtime removes every ``PIP_*`` variable from
uv's environment anyway (:mod:`gym_runtime.venvs.uvrun`). An operator who set an index for pip
(``PIP_INDEX_URL``, ``PIP_EXTRA_INDEX_URL``, ``PIP_FIND_LINKS``, or ``index-url`` /
``extra-index-url`` / ``find-links`` in a pip configuration file) gets builds that resolve
against PyPI instead. :func:`ignored_pip_indexes` finds such settings; the build's diagnosis adds
them to the hint of a failure to resolve from the index, and ``doctor`` lists them, each with
the uv equivalent (``UV_DEFAULT_INDEX``, ``UV_INDEX``, ``UV_FIND_LINKS``).
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gym_runtime.settings import user_home
from gym_runtime.venvs.uvrun import redact_url

# pip's setting -> (its variable, uv's equivalent variable)
SETTINGS = {
    "index-url": ("PIP_INDEX_URL", "UV_DEFAULT_INDEX"),
    "extra-index-url": ("PIP_EXTRA_INDEX_URL", "UV_INDEX"),
    "find-links": ("PIP_FIND_LINKS", "UV_FIND_LINKS"),
}


@dataclass(frozen=True)
class PipSetting:
    """One pip index setting: ``where`` (``PIP_INDEX_URL`` or ``/etc/pip.conf [global] index-url``),
    ``value`` (credentials in a URL masked) and ``uv`` (the variable uv reads instead)."""

    where: str
    value: str
    uv: str

    def describe(self) -> str:
        return f"{self.where}={self.value} (uv ignores it; uv reads {self.uv})"


def pip_config_files(environ: Mapping[str, str]) -> list[Path]:
    """The configuration files pip reads, in pip's order (pip's documentation, "Configuration"):
    ``PIP_CONFIG_FILE``, the global ones, the user's, the virtual environment's; none when
    ``PIP_CONFIG_FILE`` is ``os.devnull`` (pip's switch for "load no configuration file")."""
    if environ.get("PIP_CONFIG_FILE") == os.devnull:
        return []
    home = user_home(environ, "pip's user configuration (~/.config/pip)")
    xdg_dirs = (environ.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":")
    files = [Path(environ["PIP_CONFIG_FILE"])] if environ.get("PIP_CONFIG_FILE") else []
    files += [Path(d) / "pip" / "pip.conf" for d in xdg_dirs if d] + [Path("/etc/pip.conf")]
    files += [home / ".pip" / "pip.conf", Path(environ.get("XDG_CONFIG_HOME") or home / ".config") / "pip" / "pip.conf"]
    if environ.get("VIRTUAL_ENV"):
        files.append(Path(environ["VIRTUAL_ENV"]) / "pip.conf")
    return files


def ignored_pip_indexes(environ: Mapping[str, str]) -> list[PipSetting]:
    """Every pip index setting in ``environ`` and pip's configuration files (module doc)."""
    out = [PipSetting(var, _shown(environ[var]), uv) for var, uv in SETTINGS.values() if environ.get(var)]
    for path in pip_config_files(environ):
        parser = configparser.ConfigParser(interpolation=None)
        try:
            if not path.is_file() or not parser.read(path, encoding="utf-8"):
                continue
        except (OSError, configparser.Error, UnicodeDecodeError):
            continue
        for section in ("global", "install"):
            for key, (_, uv) in SETTINGS.items():
                value = parser.get(section, key, fallback=None)
                if value and value.strip():
                    out.append(PipSetting(f"{path} [{section}] {key}", _shown(value.strip()), uv))
    return out


def _shown(value: str) -> str:
    return " ".join(redact_url(v) for v in value.split())


def pip_hint(environ: Mapping[str, str]) -> str:
    """A sentence for a failed resolution's hint, or ``""`` when pip has no index settings."""
    found = ignored_pip_indexes(environ)
    if not found:
        return ""
    return (
        "note: "
        + "; ".join(s.describe() for s in found)
        + ": give the index to uv instead, e.g. "
        + ", ".join(sorted({f"{s.uv}=<url>" for s in found}))
    )
