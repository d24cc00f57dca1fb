"""The warning for gym-runtime's old ``ray_enabled`` key in a server's config block (docs/runtime.md, "Ray").

The key is gone: the server's class declares ``ray_enabled`` (NeMo Gym 0.7.0;
:mod:`gym_runtime.ray.use` reads it), and the key would only reach the server's config,
where a model with ``extra="forbid"`` (0.7.0's environment servers) refuses it. A config that still
sets one gets the warning ``GR-CONFIG-RAY-ENABLED`` saying what to do instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gym_runtime.errors import Violation

if TYPE_CHECKING:
    from gym_runtime.config.instances import ServerInstance
    from gym_runtime.config.sources import Sources


def ray_enabled_keys(instances: dict[str, ServerInstance], sources: Sources) -> list[Violation]:
    """A ``GR-CONFIG-RAY-ENABLED`` warning for each server block that sets ``ray_enabled`` (module doc)."""
    out = []
    for name, inst in instances.items():
        if "ray_enabled" not in inst.config:
            continue
        key = f"{name}.{inst.server_type}.{inst.implementation}.ray_enabled"
        out.append(
            Violation(
                "GR-CONFIG-RAY-ENABLED",
                "gym-runtime does not read ray_enabled from a server's config: the server's "
                "class declares whether it uses Ray; the key only reaches the server's config, where a config model "
                'with extra="forbid" refuses it',
                file=sources.of(key),
                key=key,
                hint="remove the key and declare `ray_enabled = True` (or False) on the server class whose "
                "run_webserver() the entrypoint calls, as NeMo Gym 0.7 servers do",
            )
        )
    return out
