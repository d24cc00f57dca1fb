"""Checks of every setting and flag of ``up`` that need no venv, run before any venv build.

A bad operator setting (``NMP_RL_SANDBOX_ALLOW_INTERNET=maybe``: ``GR-SETTINGS-EGRESS``, exit 1),
conflicting flags (``--require-isolation`` with ``--isolation partial|none``: ``GR-USAGE``, exit 2)
and an isolation level this host cannot give (``GR-SANDBOX-ISOLATION``, exit 3) are reported in a
second, not after minutes of building. The one check left for later: Ray servers need ``partial``
(``gym_runtime.ray.target.ray_level``), known only once the venvs exist.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from gym_runtime.errors import IsolationError, UsageError

HINT = (
    "run where unprivileged user namespaces are allowed (user.max_user_namespaces > 0, no AppArmor/seccomp "
    "block), with an unmasked /proc (Kubernetes: procMount: Unmasked) and bubblewrap available"
)


def check_flags(require_isolation: bool, isolation: str | None, max_concurrent_rollouts: int | None = None) -> None:
    """Raise :class:`UsageError` when the flags contradict each other or a bound is below 1."""
    if max_concurrent_rollouts is not None and max_concurrent_rollouts < 1:
        raise UsageError(
            f"--max-concurrent-rollouts must be at least 1, got {max_concurrent_rollouts}",
            hint="leave it out for the default: 32 per agent replica (docs/rollouts.md)",
        )
    if require_isolation and isolation not in (None, "full"):
        raise UsageError(
            f"--require-isolation and --isolation {isolation} conflict: the first demands full "
            f"isolation, the second forces {isolation!r}",
            code="GR-USAGE-CONFLICT",
            hint=f"drop one of them: --require-isolation to fail unless full isolation is available, "
            f"--isolation {isolation} to run at {isolation} on purpose",
        )


async def check_host(
    environ: Mapping[str, str], endpoints: list[str], require_isolation: bool, isolation: str | None
) -> Any:
    """The egress policy (raises ``SettingsError`` for a bad operator variable) after checking that
    this host gives the isolation asked for (raises :class:`IsolationError`; the probe is cached,
    so the sandbox's own start does not probe again)."""
    from sandbox import EgressPolicy, IsolationLevel, probe_isolation

    policy = EgressPolicy.from_environ(environ, policy_endpoints=endpoints)
    report = await asyncio.to_thread(probe_isolation)
    why = "; ".join(report.reasons)
    if isolation is not None and IsolationLevel(isolation).rank > report.level.rank:
        raise IsolationError(
            f"isolation level {isolation!r} requested (--isolation) but this host allows only {report.level.value!r}",
            cause=why,
            hint=HINT,
        )
    if require_isolation and report.level != IsolationLevel.FULL:
        raise IsolationError(
            f"full isolation required (--require-isolation) but this host allows only {report.level.value!r}",
            cause=why,
            hint=HINT,
        )
    return policy
