"""The one error hierarchy of gym-runtime.

Every error a user can cause or fix is a :class:`GymRuntimeError` with a stable ``code``
(``GR-<AREA>-<WHAT>``), a message naming the file / key path / server, an optional ``cause``
and a ``hint`` saying what to do. The CLI prints them as one short block (uv's shape:
``error`` / ``cause`` / ``hint`` / ``log``) without a traceback and exits with ``exit_code``.

Exit codes (documented in the README):

====  =====================================================================
0     success
1     invalid input: package, manifest, config, dataset rows, flag values
2     usage: unknown command or flag, missing argument
3     runtime failure: a venv build, a server start, a rollout, the host
130   interrupted: SIGINT/SIGTERM before the work was done (e.g. a cancelled build)
====  =====================================================================

A package or config check that finds several problems raises one error carrying every
:class:`Violation` (``violations``), so the user sees all of them at once.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_RUNTIME = 3
EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class Violation:
    """One broken rule: ``code`` (e.g. ``GR-PKG-JSONL``), a message, and where it is.

    ``file`` is a path relative to the package root when inside it; ``key`` a dotted key
    path inside that file (e.g. ``config_paths[1]``); ``hint`` what to do about it.
    """

    code: str
    message: str
    file: str | None = None
    key: str | None = None
    hint: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The violation as a JSON-ready dict (``None`` fields left out)."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    def render(self) -> str:
        """One or more lines for a human: ``[CODE] file: key: message`` then the hint."""
        where = ": ".join(p for p in (self.file, self.key) if p)
        head = f"[{self.code}] " + (f"{where}: " if where else "") + self.message
        return head + (f"\n    hint: {self.hint}" if self.hint else "")


class GymRuntimeError(Exception):
    """Base of every error gym-runtime raises on purpose.

    Attributes: ``code`` (stable string), ``message``, ``cause`` (the underlying reason, e.g.
    uv's own words), ``hint`` (what to try), ``log`` (a log file with the full story),
    ``violations`` (for multi-problem errors), ``exit_code``.
    """

    code = "GR-INTERNAL"
    exit_code = EXIT_RUNTIME

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        cause: str | None = None,
        log: str | Path | None = None,
        violations: list[Violation] | None = None,
        code: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.cause = cause
        self.log = str(log) if log is not None else None
        self.violations = list(violations or [])
        self.extra = dict(extra or {})
        if code is not None:
            self.code = code

    def to_dict(self) -> dict[str, Any]:
        """JSON shape: ``{"code", "message", "cause"?, "hint"?, "log"?, "violations"?}``."""
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        for k in ("cause", "hint", "log"):
            if getattr(self, k):
                out[k] = getattr(self, k)
        if self.violations:
            out["violations"] = [v.to_dict() for v in self.violations]
        out.update(self.extra)
        return out

    def render(self) -> str:
        """The human block: ``error[CODE]: message`` / violations / ``cause:`` / ``hint:`` / ``log:``."""
        lines = [f"error[{self.code}]: {self.message}"]
        lines += ["  " + v.render().replace("\n", "\n  ") for v in self.violations]
        if self.cause:
            lines.append("cause: " + self.cause.rstrip().replace("\n", "\n       "))
        if self.hint:
            lines.append("hint: " + self.hint)
        if self.log:
            lines.append("log: " + self.log)
        return "\n".join(lines)


class UserError(GymRuntimeError):
    """Invalid input the user can fix (exit 1)."""

    code = "GR-INPUT"
    exit_code = EXIT_INVALID


class UsageError(GymRuntimeError):
    """A command line that does not parse (exit 2)."""

    code = "GR-USAGE"
    exit_code = EXIT_USAGE


class PackageInvalidError(UserError):
    """The environment package breaks one or more rules (docs/architecture.md §3); see ``violations``."""

    code = "GR-PKG-INVALID"


class ConfigError(UserError):
    """The merged configuration is unusable (docs/architecture.md §4); one or more ``violations``."""

    code = "GR-CONFIG"


class MissingValuesError(ConfigError):
    """Values left as ``???`` or ``${...}`` interpolations that resolve to nothing (cases C02, C20)."""

    code = "GR-CONFIG-MISSING"


class ServerRefNotFoundError(ConfigError):
    """A ``{type, name}`` server reference names an instance that is not defined (case C03a)."""

    code = "GR-CONFIG-REF"


class DatasetError(UserError):
    """Dataset rows (JSONL) that do not fit docs/architecture.md §9; ``violations`` name line and field."""

    code = "GR-DATASET"


class SettingsError(UserError):
    """An operator setting (environment variable or runtime flag) has a bad value."""

    code = "GR-SETTINGS"


class BuildError(GymRuntimeError):
    """A venv build failed (exit 3): names server, stage, file, cause, fix and log."""

    code = "GR-BUILD"


class BuildCancelledError(BuildError):
    """Venv builds were cancelled by a stop request (SIGINT/SIGTERM); nothing half-built was kept."""

    code = "GR-BUILD-CANCELLED"
    exit_code = EXIT_INTERRUPTED


class StartError(GymRuntimeError):
    """A server failed to start, crashed, or never became ready (exit 3)."""

    code = "GR-START"


class IsolationError(GymRuntimeError):
    """The requested isolation level is not available on this host (exit 3)."""

    code = "GR-SANDBOX-ISOLATION"


class SandboxServiceError(GymRuntimeError):
    """The operator's OpenSandbox server could not be used (exit 3): unreachable, a create refused
    (quota, a mount outside its allowed host paths), a sandbox deleted from outside or lost while
    the server restarted. Codes ``GR-OSB-*`` (sandbox/opensandbox/failures.py, docs/runtime.md)."""

    code = "GR-OSB"


class SandboxServiceSettingsError(SettingsError):
    """An OpenSandbox setting is wrong (exit 1): ``OPENSANDBOX_API_KEY`` refused, or the image
    ``GYM_RUNTIME_OPENSANDBOX_IMAGE`` names is not on the server's runtime, or a setting the
    backend needs is missing. Codes ``GR-OSB-*``."""

    code = "GR-OSB-SETTINGS"


class RolloutError(GymRuntimeError):
    """Rollouts failed during a dry-run (exit 3)."""

    code = "GR-ROLLOUT"


@dataclass
class ViolationList:
    """Collects violations while checking; ``raise_if_any`` turns them into one error."""

    items: list[Violation] = field(default_factory=list)

    def add(self, code: str, message: str, **where: str | None) -> None:
        self.items.append(Violation(code, message, **where))

    def extend(self, more: list[Violation]) -> None:
        self.items.extend(more)

    def __bool__(self) -> bool:
        return bool(self.items)

    def raise_if_any(self, error_cls: type[GymRuntimeError], summary: str) -> None:
        """Raise ``error_cls(summary, violations=...)`` when anything was collected."""
        if self.items:
            n = len(self.items)
            raise error_cls(f"{summary} ({n} problem{'s' if n != 1 else ''})", violations=self.items)
