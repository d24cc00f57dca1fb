"""The kernel's cap on one environment string, checked for every server before it is started.

Linux refuses an ``execve`` whose argv or environment holds one string (``NAME=value`` and its
terminating NUL) longer than ``MAX_ARG_STRLEN`` = 32 pages (131,072 bytes with 4 KiB pages;
``include/uapi/linux/binfmts.h``), with ``E2BIG`` ("Argument list too long"), whatever the total
size. NeMo Gym's server contract passes a server its whole view of the merged config in one
variable, ``NEMO_GYM_CONFIG_DICT``, and Gym 0.4 to 0.7 read it from there alone
(``nemo_gym/global_config.py``: ``OmegaConf.create(getenv(NEMO_GYM_CONFIG_DICT_ENV_VAR_NAME))``), so
it cannot be handed over another way. A server whose variable is too long either fails to start or,
when forked from a preloaded parent (no ``execve``), starts and then every program it runs fails
(case C61: a code-execution tool, rows scored 0.000 with no error). Such a start is refused, before
any venv build (:func:`check_config_sizes`, an estimate with the longest port numbers) and again on
the exact environment of each server (:func:`check_specs`), with one ``GR-CONFIG-ENV-TOO-BIG``
block (exit 1) naming the servers, the size, the limit and the biggest keys of the config.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from gym_runtime.errors import ConfigError
from gym_runtime.supervise import contract

CODE = "GR-CONFIG-ENV-TOO-BIG"
PLACEHOLDER_PORT = 65535  # the longest port number: the estimate before ports are chosen is not short
MARGIN = 4096  # bytes: a mix of masked and unmasked secrets, or an OpenSandbox gate's address, adds no more


def max_arg_strlen() -> int:
    """``MAX_ARG_STRLEN`` of this host in bytes: 32 pages (131,072 with 4 KiB pages, 2 MiB with 64 KiB)."""
    return 32 * os.sysconf("SC_PAGE_SIZE")


def entry_bytes(name: str, value: str) -> int:
    """Bytes the kernel counts for variable ``name`` = ``value``: ``NAME=value`` in UTF-8 and its NUL."""
    return len(name.encode()) + 1 + len(value.encode("utf-8", "surrogateescape")) + 1


def biggest_keys(config_yaml: str, count: int = 3) -> list[tuple[str, int]]:
    """The ``count`` largest parts of a config (``NEMO_GYM_CONFIG_DICT`` text) as (dotted key path,
    bytes of its YAML), largest first: the deepest keys that hold at least a tenth of the whole, not
    an ancestor of one listed (``rubric_env.resources_servers.rubric_env.rubric``, not its instance)."""
    data = yaml.safe_load(config_yaml)
    total = len(config_yaml.encode())
    found: list[tuple[str, int]] = []

    def walk(node: Any, path: str) -> bool:
        """Record ``node``'s big descendants, else ``node`` itself when big; True if anything was recorded."""
        items = node.items() if isinstance(node, dict) else ()
        below = [walk(v, f"{path}.{k}" if path else str(k)) for k, v in items]
        if any(below):
            return True
        size = _size(node)
        if path and size * 10 >= total:
            found.append((path, size))
            return True
        return False

    walk(data, "")
    return sorted(found, key=lambda f: -f[1])[:count]


def _size(node: Any) -> int:
    return len(yaml.safe_dump(node, sort_keys=False, allow_unicode=True).encode())


def check_config_sizes(merged: Any, environ_name: str = contract.CONFIG_VAR) -> None:
    """Before any venv build: raise :class:`ConfigError` (``GR-CONFIG-ENV-TOO-BIG``) when a server's
    ``NEMO_GYM_CONFIG_DICT`` would pass :func:`max_arg_strlen`. ``merged`` is the merged config
    (``data``, ``instances``, ``secrets``); each view is made as at start with every port 65535 and
    no Ray address (the exact check is :func:`check_specs`)."""
    addresses = {n: (i.host or "127.0.0.1", PLACEHOLDER_PORT) for n, i in merged.instances.items()}
    inside = contract.config_view(merged.data, addresses, ("127.0.0.1", PLACEHOLDER_PORT), None)
    # every view is the same config with some secrets masked: when neither extreme comes near the
    # limit no view does, and the N dumps (about a second each for a 150 KB config) are not needed
    extremes = (contract.to_yaml(inside), contract.to_yaml(merged.secrets.view(inside)))
    if max(entry_bytes(environ_name, t) for t in extremes) + MARGIN <= max_arg_strlen():
        return
    texts = {n: contract.server_config_yaml(inside, merged.secrets, n) for n in merged.instances}
    check_envs({n: {environ_name: t} for n, t in texts.items()}, environ_name, getattr(merged, "sources", None))


def check_specs(specs: Iterable[Any]) -> None:
    """Raise :class:`ConfigError` (``GR-CONFIG-ENV-TOO-BIG``) when one string of a server's whole
    environment (``ProcessSpec.env`` and ``private_env``, what the server and its children get) is
    too long for ``execve``. ``specs``: the ``ProcessSpec`` of each server (its ``name``)."""
    check_envs({s.name: {**s.env, **s.private_env} for s in specs})


def check_envs(
    envs: Mapping[str, Mapping[str, str]], config_var: str = contract.CONFIG_VAR, sources: Any = None
) -> None:
    """Raise :class:`ConfigError` (``GR-CONFIG-ENV-TOO-BIG``) when a variable of ``envs`` (server name
    -> its whole environment) is too long for ``execve`` (:func:`entry_bytes` over :func:`max_arg_strlen`);
    when ``config_var`` is among them, the error names the biggest keys of that config, each with the
    file that set it when ``sources`` (:class:`gym_runtime.config.sources.Sources`) knows it."""
    limit = max_arg_strlen()
    over = {
        (name, var): entry_bytes(var, value)
        for name, env in envs.items()
        for var, value in env.items()
        if entry_bytes(var, value) > limit
    }
    if not over:
        return
    worst_name, worst_var = max(over, key=over.__getitem__)
    by_var: dict[str, list[str]] = {}
    for name, var in over:
        by_var.setdefault(var, []).append(name)
    parts = [
        f"{_names(names)} would get {var} of {max(over[(n, var)] for n in names):,} bytes"
        for var, names in by_var.items()
    ]
    message = (
        "; ".join(parts) + f": Linux refuses any one environment string (NAME=value and its NUL) over {limit:,} "
        "bytes (MAX_ARG_STRLEN, 'Argument list too long'), so a server would not start, or would start and every "
        "program it runs would fail"
    )
    if config_var in by_var:
        name = max(by_var[config_var], key=lambda n: over[(n, config_var)])
        keys = biggest_keys(envs[name][config_var])
        where = {k: sources.of(k) if sources is not None else None for k, _ in keys}
        cause = f"biggest keys of the config server {name!r} gets: " + ", ".join(
            f"{k} ({b:,} bytes" + (f", from {where[k]})" if where[k] else ")") for k, b in keys
        )
        hint = (
            "NeMo Gym servers read their whole config from NEMO_GYM_CONFIG_DICT, and every server gets every "
            "instance's block: move large values (a rubric, few-shot examples, a long prompt) into a file in the "
            "server's directory and have the server read it, keeping the config under the limit"
        )
    else:
        cause = f"variable {worst_var} of server {worst_name!r}"
        hint = f"pass a shorter {worst_var} to the server (GYM_RUNTIME_SERVER_ENV or the daemon's environment), e.g. a path to a file holding the value"
    raise ConfigError(message, code=CODE, cause=cause, hint=hint)


def _names(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in sorted(names))
    return f"server {shown}" if len(names) == 1 else f"servers {shown}"
