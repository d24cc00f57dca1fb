"""The manifest ``nemo-environment.yaml``: a closed pydantic schema discriminated on ``format``.

Contract: DESIGN.md §3 and reference/nmp_env_packages.md §1.2 (NMP's ``schemas/environment.py`` and
``sandboxed_gym/environment_package.py``). Unknown keys are rejected everywhere. Path rules that
need the filesystem (existence, symlinks, containment after resolution) live in ``layout.py``;
this module checks only what the manifest text alone can tell.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from gym_runtime.errors import Violation

MANIFEST_NAME = "nemo-environment.yaml"
NATIVE_PREFIXES = ("responses_api_agents/", "resources_servers/", "responses_api_models/")
ADAPTER_PREFIX = "configs/"
BUILTIN_ADAPTER_AGENTS = {"verifiers_agent": "responses_api_agents/verifiers_agent"}


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Metadata(_Closed):
    """``metadata``: descriptive only; ``vf_env_id`` is checked against dataset rows."""

    name: str = Field(min_length=1, max_length=255)
    description: str | None = Field(default=None, max_length=2048)
    hub_id: str | None = Field(default=None, max_length=512)
    vf_env_id: str | None = Field(default=None, max_length=512)
    adapter_agent: str | None = Field(default=None, max_length=255)


class Adapter(_Closed):
    """``adapter`` (adapter-wheels-v1 only): which built-in agent runs the wheels."""

    agent: str = Field(min_length=1)
    agent_type: Literal["responses_api_agents"] = "responses_api_agents"
    image_config_root: str | None = None

    @field_validator("agent")
    @classmethod
    def _builtin(cls, v: str) -> str:
        if v not in BUILTIN_ADAPTER_AGENTS:
            raise ValueError(
                f"adapter.agent {v!r} is not built into the runtime image. "
                f"Supported: {', '.join(BUILTIN_ADAPTER_AGENTS)}"
            )
        return v


def _check_path_text(p: str) -> str:
    if not p or p != p.strip():
        raise ValueError("config paths must be non-empty and cannot have surrounding whitespace")
    if "\\" in p:
        raise ValueError(f"config paths must use POSIX '/' separators: {p!r}")
    if p.startswith("/"):
        raise ValueError(f"config paths must be relative to the package root: {p!r}")
    if any(seg in (".", "..", "") for seg in p.split("/")):
        raise ValueError(f"config paths cannot contain '.', '..' or empty segments: {p!r}")
    return p


ConfigPath = Annotated[str, Field(min_length=1)]


class _ManifestBase(_Closed):
    config_paths: list[ConfigPath]
    metadata: Metadata

    @field_validator("config_paths")
    @classmethod
    def _paths(cls, v: list[str]) -> list[str]:
        for p in v:
            _check_path_text(p)
        dupes = sorted({p for p in v if v.count(p) > 1})
        if dupes:
            raise ValueError(f"config_paths cannot contain duplicates: {', '.join(dupes)}")
        return v


class NativeManifest(_ManifestBase):
    """``native-v1``: Gym server trees only, configs under a server type directory."""

    format: Literal["native-v1"]

    @field_validator("config_paths")
    @classmethod
    def _native(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("native-v1 config_paths must name at least one config")
        bad = [p for p in v if not p.startswith(NATIVE_PREFIXES)]
        if bad:
            raise ValueError(f"native-v1 config_paths must be under {NATIVE_PREFIXES}: {', '.join(bad)}")
        return v


class WheelsManifest(_ManifestBase):
    """``wheels-v1``: server trees plus a vendored ``wheels/`` closure; configs anywhere."""

    format: Literal["wheels-v1"]


class AdapterManifest(_ManifestBase):
    """``adapter-wheels-v1``: a built-in adapter agent runs environments shipped as wheels."""

    format: Literal["adapter-wheels-v1"]
    adapter: Adapter

    @field_validator("config_paths")
    @classmethod
    def _adapter(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("adapter-wheels-v1 config_paths must name at least one config")
        bad = [p for p in v if not p.startswith(ADAPTER_PREFIX)]
        if bad:
            raise ValueError(f"adapter-wheels-v1 config_paths must be under configs/: {', '.join(bad)}")
        return v


Manifest = Annotated[Union[NativeManifest, WheelsManifest, AdapterManifest], Field(discriminator="format")]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(Manifest)
FORMATS = ("native-v1", "wheels-v1", "adapter-wheels-v1")


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in FORMATS or part in ("function-after", "literal_error"):
            continue  # pydantic's union tag, not a key of the file
        else:
            out += ("." if out else "") + str(part)
    return out


def _pydantic_violations(err: ValidationError) -> list[Violation]:
    out = []
    for e in err.errors():
        key = _loc(e["loc"]) or None
        msg = e["msg"].removeprefix("Value error, ")
        code, hint = "GR-PKG-MANIFEST", None
        if e["type"] == "extra_forbidden":
            code, msg = "GR-PKG-MANIFEST-UNKNOWN-KEY", "unknown key (the manifest schema is closed)"
            hint = "remove it; runtime settings such as egress are operator settings, never manifest keys"
            if key == "adapter":
                code = "GR-PKG-ADAPTER"
                msg = "adapter is only allowed for format adapter-wheels-v1"
                hint = "remove the adapter block, or use format: adapter-wheels-v1"
        elif e["type"] == "missing":
            code, msg = "GR-PKG-MANIFEST-MISSING-KEY", "required key is missing"
            if key == "adapter":
                code, hint = "GR-PKG-ADAPTER", "add adapter: {agent: verifiers_agent, agent_type: responses_api_agents}"
        elif e["type"] == "union_tag_invalid" or e["type"] == "union_tag_not_found":
            code, key = "GR-PKG-FORMAT", "format"
            msg = f"format must be one of {', '.join(FORMATS)}"
        elif key and key.startswith("config_paths"):
            code = "GR-PKG-CONFIG-PATH"
        elif key and key.startswith("adapter"):
            code = "GR-PKG-ADAPTER"
        elif key and key.startswith("metadata"):
            code = "GR-PKG-METADATA"
        out.append(Violation(code, msg, file=MANIFEST_NAME, key=key, hint=hint))
    return out


def parse_manifest(root: Path) -> tuple[NativeManifest | WheelsManifest | AdapterManifest | None, list[Violation]]:
    """Read ``root/nemo-environment.yaml`` into a manifest model.

    Returns ``(manifest, [])`` or ``(None, violations)``; never raises for bad input.
    Violations: missing/not-a-file manifest, malformed YAML (with line/column), a non-mapping,
    and every schema error with its key path.
    """
    path = root / MANIFEST_NAME
    if path.is_symlink() or not path.is_file():
        return None, [Violation("GR-PKG-NO-MANIFEST", f"missing {MANIFEST_NAME} at the package root ({root})",
                                file=MANIFEST_NAME,
                                hint="an environment package is a directory with nemo-environment.yaml at its root")]
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        return None, [Violation("GR-PKG-MANIFEST-YAML", "is not UTF-8 text", file=MANIFEST_NAME)]
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        return None, [Violation("GR-PKG-MANIFEST-YAML", f"is not valid YAML{where}: {problem}", file=MANIFEST_NAME)]
    if not isinstance(data, dict):
        return None, [Violation("GR-PKG-MANIFEST-YAML", f"must be a mapping, got {type(data).__name__}",
                                file=MANIFEST_NAME, hint="see DESIGN.md §3 for the keys")]
    try:
        return _ADAPTER.validate_python(data), []
    except ValidationError as e:
        return None, _pydantic_violations(e)
