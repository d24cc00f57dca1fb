"""Whether a running environment can follow an edit's change of which servers use Ray (``dry-run --watch``).

The environment's Ray decision (:class:`gym_runtime.ray.target.RayTarget`) is made once, at its
start, from what each server is then (:mod:`gym_runtime.ray.use`): whether a private
Ray head runs, which servers get a driver and the isolation level follow from it. Two edits can
change what a server is:

* its install file, rebuilt into a new venv (:mod:`gym_runtime.supervise.venv_swap`): a server that
  uses Ray with the new venv is not moved onto it (``GR-BUILD-WATCH-RAY``) unless the environment
  joined a Ray cluster or each server runs its own (mode ``join`` or ``own``) and the start gave
  it Ray: the private head's sandbox reads the venvs it started with, and a server started without
  Ray has none to use;
* its tree (its class now declares ``ray_enabled = True``, or its code now imports Ray): a server
  that the start ran without Ray is not restarted on it (``GR-START-WATCH-RAY``): it would start
  without a driver, or stop at once when its class declares Ray while it runs
  (:mod:`gym_runtime.ray.switch`). A tree counted as reaching Ray only because a file of it
  does not parse is restarted when the server's own interpreter cannot compile that file either:
  its start fails with the compiler's error, the one to show (a file of a newer Python's syntax
  than the daemon's still counts).

Either way the server keeps running as it was; starting the watch again decides anew (a rebuilt
venv is then reused). A server that stops using Ray is followed: a driver it no longer calls costs
nothing.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from gym_runtime.errors import BuildError, StartError

# exit 3 when the file given does not compile (a SyntaxError); 0 when it does
_COMPILE = (
    "import sys\ntry:\n    compile(open(sys.argv[1], 'rb').read(), sys.argv[1], 'exec')\n"
    "except SyntaxError:\n    sys.exit(3)\n"
)


def _uses(env: Any, names: list[str], pythons: dict[str, Path]) -> dict[str, Any]:
    """Instance -> :class:`~gym_runtime.ray.use.RayUse` for ``names`` as the package and
    ``pythons`` (instance -> venv Python) are now."""
    from gym_runtime.gym_release.sdk_index import index_for
    from gym_runtime.ray.use import gym_sdk_venv, ray_use

    if not names:
        return {}
    merged = env.merged
    index = index_for(merged.release, merged.package)[0] if merged.release is not None else None
    return {
        n: ray_use(merged.instances[n], merged, gym_sdk_venv(pythons[n]), index, env.settings.ray_undeclared)
        for n in names
    }


def _because(use: dict[str, Any], users: list[str]) -> str:
    """Why each of ``users`` uses Ray, the name left out when there is one."""
    if len(users) == 1:
        return use[users[0]].why
    return "; ".join(f"{n} {use[n].why}" for n in users)


def check_rebuilt(env: Any, changed: dict[str, Any]) -> None:
    """Raise :class:`BuildError` ``GR-BUILD-WATCH-RAY`` naming the servers of ``changed`` (instance
    -> its new venv, with ``python``) that use Ray with it where the running environment ``env``
    cannot give it them: any under a private Ray head, and those the start gave no Ray otherwise
    (module doc)."""
    if not changed:
        return
    use = _uses(env, list(changed), {n: Path(v.python) for n, v in changed.items()})
    users = [n for n in changed if use[n].uses]
    if env.ray.mode in ("join", "own"):  # a server given Ray at the start takes it on the new venv
        users = [n for n in users if n not in env.ray.needed_by]
    if not users:
        return
    label = ", ".join(users)
    one = len(users) == 1
    runs = (
        "its private Ray head runs with the venvs the environment started with"
        if env.ray.mode == "local"
        else f"the running environment started {'it' if one else 'them'} without Ray"
    )
    raise BuildError(
        f"the rebuilt venv of {label} cannot be used by the running environment: {label} "
        f"use{'s' if one else ''} Ray ({_because(use, users)}) and {runs}",
        code="GR-BUILD-WATCH-RAY",
        hint=f"stop with Ctrl-C and start dry-run --watch again to bring {label} up on the new venv "
        "(it is built: the start reuses it)",
        extra={"servers": users, "stage": "watch"},
    )


def _fails_to_compile(source: Path | None, python: Path) -> bool:
    """Whether ``source`` (a file the daemon's interpreter could not parse) does not compile under
    the server's own ``python`` either: then its start fails with that error, the one to show."""
    if source is None:
        return False
    try:
        done = subprocess.run([str(python), "-I", "-c", _COMPILE, str(source)], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False  # unknown: it counts as using Ray, as at the start
    return done.returncode == 3


def check_edited(env: Any, names: list[str]) -> None:
    """Raise :class:`StartError` ``GR-START-WATCH-RAY`` naming the servers of ``names`` (instances
    about to restart after an edit, on the venvs they run on) that now use Ray where the running
    environment ``env`` started them without it (module doc)."""
    given = set(env.ray.needed_by)
    use = _uses(env, [n for n in names if n not in given], env.placement.pythons)
    users = [
        n
        for n in names
        if n in use and use[n].uses and not _fails_to_compile(use[n].unparsed, env.placement.pythons[n])
    ]
    if not users:
        return
    label = ", ".join(users)
    one = len(users) == 1
    raise StartError(
        f"after this edit {label} use{'s' if one else ''} Ray ({_because(use, users)}), but the "
        f"running environment started {'it' if one else 'them'} without Ray: "
        f"{'it keeps' if one else 'they keep'} running the code {'it' if one else 'they'} started with",
        code="GR-START-WATCH-RAY",
        hint=f"stop with Ctrl-C and start dry-run --watch again to bring {label} up with Ray (or undo the edit)",
        extra={"servers": users, "stage": "watch"},
    )
