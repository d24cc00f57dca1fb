"""The operator's variables passed into server processes (``GYM_RUNTIME_SERVER_ENV``, docs/architecture.md §7.1).

Gym's launcher hands every server its whole environment (NeMo Gym 0.7.0 ``nemo_gym/cli/setup_command.py``
``run_command``: ``environ.copy()``), and many trees read keys from it (``OPENROUTER_API_KEY``,
``ANTHROPIC_API_KEY``, ``HF_TOKEN``). The runtime hands a server an explicit allowlist instead, so
a key reaches a server only when the operator names it:

* ``NAME`` passes the daemon's ``NAME`` to every server instance: what Gym's launcher does, for a
  key several servers read or when the operator does not know which one does;
* ``INSTANCE:NAME`` passes it to that server instance alone: a credential only one server needs
  stays out of every other server's sandbox, as a config secret does (§4).

Values come from the daemon's environment snapshot (``RuntimeSettings.environ``) when the server
starts; a name that is unset there is not passed (``config`` and ``doctor --package`` say so). The
values travel as the server's *private* variables (``ProcessSpec.private_env``): in the server
process's own environment, never in bubblewrap's, never on a command line (§6). They do not reach
the Ray workers of a server that uses Ray (a Ray job's variables are readable by every driver of
the cluster). Names and values are never written to a config dump, the ready line or a log.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from gym_runtime.errors import SettingsError
from gym_runtime.settings import SERVER_ENV_VAR, RuntimeSettings


def names_for(settings: RuntimeSettings, instance: str) -> list[str]:
    """The variable names passed to ``instance``, in the setting's order."""
    return list(dict.fromkeys(n for n, scope in settings.server_env if scope in (None, instance)))


def values_for(settings: RuntimeSettings, instance: str) -> dict[str, str]:
    """``{name: value}`` of the variables passed to ``instance`` that are set in the daemon's
    environment (an unset one is left out, as an unset variable is under Gym's launcher)."""
    env = settings.environ
    return {n: env[n] for n in names_for(settings, instance) if n in env}


def check(settings: RuntimeSettings, instances: Iterable[str]) -> None:
    """Raise :class:`SettingsError` (``GR-SETTINGS-SERVER-ENV``) for an ``INSTANCE:NAME`` entry whose
    instance is not a server instance of this environment (a typo would silently pass nothing)."""
    known = list(instances)
    for name, scope in settings.server_env:
        if scope is not None and scope not in known:
            close = difflib.get_close_matches(scope, known, n=1)
            raise SettingsError(
                f"{SERVER_ENV_VAR}: {scope}:{name} names no server instance of this environment",
                code="GR-SETTINGS-SERVER-ENV",
                hint=(f"did you mean '{close[0]}'? " if close else "")
                + f"the server instances are: {', '.join(known)}",
            )


def describe(settings: RuntimeSettings, instances: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
    """Per server instance, each variable it is passed: ``{"name", "scope": "every server" |
    "this server", "set": bool}`` (names only, never values), for ``config`` and ``doctor --package``."""
    out: dict[str, list[dict[str, Any]]] = {}
    for inst in instances:
        rows = []
        for name in names_for(settings, inst):
            scope = "every server" if (name, None) in settings.server_env else "this server"
            rows.append({"name": name, "scope": scope, "set": name in settings.environ})
        out[inst] = rows
    return out


def summary(rows: list[dict[str, Any]]) -> str:
    """One line for :func:`describe`'s rows of one instance: ``HF_TOKEN, JUDGE_KEY (this server, not set)``."""
    if not rows:
        return "none"
    parts = []
    for r in rows:
        notes = [n for n in ("this server" if r["scope"] == "this server" else "", "" if r["set"] else "not set") if n]
        parts.append(r["name"] + (f" ({', '.join(notes)})" if notes else ""))
    return ", ".join(parts)
