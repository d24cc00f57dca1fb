"""The manifest ``nemo-environment.yaml``: a closed pydantic schema discriminated on ``format``.

Contract: docs/architecture.md §3 and NMP's environment package schema, `schemas/environment.py` (NMP's ``schemas/environment.py`` and
``sandboxed_gym/environment_package.py``). Unknown keys are rejected everywhere. Path rules that
need the filesystem (existence, symlinks, containment after resolution) live in ``layout.py``;
this module checks only what the manifest text alone can tell.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator
from pydantic_core import ErrorDetails, PydanticCustomError

from gym_runtime.errors import Violation
from gym_runtime.package.layout import SERVER_TYPES
from gym_runtime.package.yamlfile import YamlProblem, load_yaml_file

MANIFEST_NAME = "nemo-environment.yaml"
NATIVE_PREFIXES = tuple(f"{t}/" for t in SERVER_TYPES)
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
        raise PydanticCustomError(
            "gr_config_path", "config paths must be non-empty and cannot have surrounding whitespace: '{p}'", {"p": p}
        )
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in p) or len(p) > 1024:
        raise PydanticCustomError(
            "gr_config_path",
            "config paths cannot contain control characters or be longer than 1024 characters: {p}",
            {"p": ascii(p)[:80]},
        )
    if "\\" in p:
        raise PydanticCustomError("gr_config_path", "config paths must use POSIX '/' separators: '{p}'", {"p": p})
    if p.startswith("/"):
        raise PydanticCustomError(
            "gr_config_path", "config paths must be relative to the package root: '{p}'", {"p": p}
        )
    if any(seg in (".", "..", "") for seg in p.split("/")):
        raise PydanticCustomError(
            "gr_config_path", "config paths cannot contain '.', '..' or empty segments: '{p}'", {"p": p}
        )
    return p


def _prefix_rule(fmt: str, prefixes: tuple[str, ...]) -> AfterValidator:
    def check(p: str) -> str:
        if not p.startswith(prefixes):
            raise PydanticCustomError(
                "gr_config_prefix",
                "{fmt} config_paths must be under {where}: '{p}'",
                {"fmt": fmt, "where": " or ".join(prefixes), "p": p},
            )
        return p

    return AfterValidator(check)


ConfigPath = Annotated[str, AfterValidator(_check_path_text)]
NativePath = Annotated[ConfigPath, _prefix_rule("native-v1", NATIVE_PREFIXES)]
AdapterPath = Annotated[ConfigPath, _prefix_rule("adapter-wheels-v1", (ADAPTER_PREFIX,))]


def _no_duplicates(v: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    for i, p in enumerate(v):
        if p in seen:
            raise PydanticCustomError(
                "gr_config_duplicate",
                "config_paths cannot contain duplicates: '{p}' is listed as entry {first} and entry {i}",
                {"p": p, "first": seen[p], "i": i},
            )
        seen[p] = i
    return v


def _non_empty(fmt: str) -> AfterValidator:
    def check(v: list[str]) -> list[str]:
        if not v:
            raise PydanticCustomError(
                "gr_config_path", "{fmt} config_paths must name at least one config", {"fmt": fmt}
            )
        return v

    return AfterValidator(check)


class NativeManifest(_Closed):
    """``native-v1``: Gym server trees only, configs under a server type directory."""

    format: Literal["native-v1"]
    config_paths: Annotated[list[NativePath], AfterValidator(_no_duplicates), _non_empty("native-v1")]
    metadata: Metadata


class WheelsManifest(_Closed):
    """``wheels-v1``: server trees plus a vendored ``wheels/`` closure; configs anywhere, maybe none
    (the package then only adds wheels to built-in servers)."""

    format: Literal["wheels-v1"]
    config_paths: Annotated[list[ConfigPath], AfterValidator(_no_duplicates)]
    metadata: Metadata


class AdapterManifest(_Closed):
    """``adapter-wheels-v1``: a built-in adapter agent runs environments shipped as wheels."""

    format: Literal["adapter-wheels-v1"]
    config_paths: Annotated[list[AdapterPath], AfterValidator(_no_duplicates), _non_empty("adapter-wheels-v1")]
    metadata: Metadata
    adapter: Adapter


class _AnyFormat(_Closed):
    """What every format shares: validated when ``format`` itself is bad, to report the rest too."""

    format: Any = None
    config_paths: Annotated[list[ConfigPath], AfterValidator(_no_duplicates)]
    metadata: Metadata
    adapter: Adapter | None = None


Manifest = Annotated[NativeManifest | WheelsManifest | AdapterManifest, Field(discriminator="format")]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(Manifest)
FORMATS = ("native-v1", "wheels-v1", "adapter-wheels-v1")
_CUSTOM_CODES = {
    "gr_config_path": "GR-PKG-CONFIG-PATH",
    "gr_config_prefix": "GR-PKG-CONFIG-PREFIX",
    "gr_config_duplicate": "GR-PKG-CONFIG-DUPLICATE",
}


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for i, part in enumerate(loc):
        if i == 0 and part in FORMATS:
            continue  # pydantic's union tag, not a key of the file
        if isinstance(part, int) and out:
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _violation(e: ErrorDetails, fmt: Any) -> Violation:
    key = _loc(e["loc"]) or None
    msg = e["msg"].removeprefix("Value error, ")
    code, hint, kind = "GR-PKG-MANIFEST", None, e["type"]
    if kind in _CUSTOM_CODES:
        code = _CUSTOM_CODES[kind]
        if kind == "gr_config_duplicate":
            key = f"config_paths[{e['ctx']['i']}]"
        if kind == "gr_config_prefix":
            hint = "move the config under one of those directories and update config_paths"
    elif kind == "extra_forbidden" and key == "adapter":
        code = "GR-PKG-ADAPTER"
        msg = f"adapter is only allowed for format adapter-wheels-v1 (this manifest is {fmt})"
        hint = "remove the adapter block, or use format: adapter-wheels-v1"
    elif kind == "extra_forbidden" or kind == "invalid_key":
        code, msg = "GR-PKG-MANIFEST-UNKNOWN-KEY", f"unknown key {key!r} (the manifest schema is closed)"
        hint = "remove it; runtime settings such as egress are operator settings, never manifest keys"
    elif key == "adapter" and kind == "missing":
        code, msg = "GR-PKG-ADAPTER", "adapter is required for format adapter-wheels-v1"
        hint = "add adapter: {agent: verifiers_agent, agent_type: responses_api_agents}"
    elif key and key.split(".")[0].split("[")[0] in ("config_paths", "metadata", "adapter"):
        code = {"config_paths": "GR-PKG-CONFIG-PATH", "metadata": "GR-PKG-METADATA", "adapter": "GR-PKG-ADAPTER"}[
            key.split(".")[0].split("[")[0]
        ]
        if kind == "missing":
            msg = f"required key {key!r} is missing"
    elif kind == "missing":
        code, msg = "GR-PKG-MANIFEST-MISSING-KEY", f"required key {key!r} is missing"
    return Violation(code, msg, file=MANIFEST_NAME, key=key, hint=hint)


def _format_violation(data: dict[Any, Any]) -> Violation:
    fmt = data.get("format")
    got = "is missing" if "format" not in data else f"{fmt!r} is not a known format"
    return Violation(
        "GR-PKG-FORMAT",
        f"format {got}; it must be one of {', '.join(FORMATS)}",
        file=MANIFEST_NAME,
        key="format",
        hint="native-v1 for Gym server trees, wheels-v1 when wheels/ vendors the "
        "dependencies, adapter-wheels-v1 for a built-in adapter agent",
    )


def validate_manifest(
    data: dict[Any, Any],
) -> tuple[NativeManifest | WheelsManifest | AdapterManifest | None, list[Violation]]:
    """Validate a parsed manifest mapping; returns the model or every violation.

    When ``format`` is missing or unknown, the rest is still checked against the rules all
    formats share, so one run reports every problem.
    """
    fmt = data.get("format")
    if not isinstance(fmt, str) or fmt not in FORMATS:
        out = [_format_violation(data)]
        try:
            _AnyFormat.model_validate(data)
        except ValidationError as e:
            out += [_violation(x, fmt) for x in e.errors()]
        return None, out
    try:
        return _ADAPTER.validate_python(data), []
    except ValidationError as e:
        return None, [_violation(x, fmt) for x in e.errors()]


def parse_manifest(root: Path) -> tuple[NativeManifest | WheelsManifest | AdapterManifest | None, list[Violation]]:
    """Read ``root/nemo-environment.yaml`` into a manifest model.

    Returns ``(manifest, [])`` or ``(None, violations)``; never raises for bad input.
    Violations: missing / symlinked / not-a-file manifest, non-UTF-8 or malformed YAML (with
    line/column), an empty file or a non-mapping, and every schema error with its key path.
    """
    path = root / MANIFEST_NAME
    hint = "an environment package is a directory with nemo-environment.yaml at its root"
    if path.is_symlink():
        return None, [
            Violation(
                "GR-PKG-MANIFEST-SYMLINK",
                f"{MANIFEST_NAME} must be a regular file, not a symlink",
                file=MANIFEST_NAME,
                hint="copy the file into the package",
            )
        ]
    if not path.exists():
        return None, [
            Violation(
                "GR-PKG-NO-MANIFEST",
                f"missing {MANIFEST_NAME} at the package root ({root})",
                file=MANIFEST_NAME,
                hint=hint,
            )
        ]
    if not path.is_file():
        return None, [Violation("GR-PKG-NO-MANIFEST", f"{MANIFEST_NAME} is not a file", file=MANIFEST_NAME, hint=hint)]
    try:
        data = load_yaml_file(path)
    except (YamlProblem, OSError) as e:
        return None, [Violation("GR-PKG-MANIFEST-YAML", str(e), file=MANIFEST_NAME)]
    if data is None:
        return None, [
            Violation(
                "GR-PKG-MANIFEST-YAML",
                "is empty; it must be a mapping with format, config_paths and metadata",
                file=MANIFEST_NAME,
                hint="see docs/environment-packages.md for the keys",
            )
        ]
    if not isinstance(data, dict):
        return None, [
            Violation(
                "GR-PKG-MANIFEST-YAML",
                f"must be a mapping, got a {type(data).__name__}",
                file=MANIFEST_NAME,
                hint="see docs/environment-packages.md for the keys",
            )
        ]
    return validate_manifest(data)
