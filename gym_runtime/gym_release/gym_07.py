"""NeMo Gym 0.7: what the 0.7 release line changed against 0.6 (:mod:`.gym_06`).

From NeMo Gym 0.7.0: a fourth server type, ``environment_servers`` (``nemo_gym/config_types.py``,
``nemo_gym/base_environment_server.py``), which rollout collection reaches agents through
(``nemo_gym/rollout_collection.py``); the routing and spin-up keys it reserves
(``nemo_gym/global_config.py``); the head server's probes (``nemo_gym/server_utils.py``
``HeadServer``: ``/livez`` always ``ok``; ``/readyz``, ``/healthz`` and ``/health`` 503 ``starting``
until every server is ready, then 200 ``ok``); servers declare whether they use Ray
(``ray_enabled`` on the server class, ``nemo_gym/server_utils.py`` ``_server_uses_ray``: undeclared
still means Ray; here only when the server's tree imports Ray, :meth:`Gym07.server_uses_ray`).
Composition (docs/environment-packages.md, "Composition"): every agent no environment server
names gets a generated ``legacy_agent`` relay
(``_front_agents_without_environment_server``), an agent moved by a top-level ``_inherit_from`` or
renamed by unbound-agent composition is followed by the environment servers naming it
(``_retarget_environment_servers``), and a resources server's ``allowed_model_types`` refuses an
agent's model server of another type (``raise_on_unsupported_model_pairings``).
"""

from __future__ import annotations

from typing import ClassVar

from gym_runtime.gym_release.gym_06 import Gym06


class Gym07(Gym06):
    """The 0.7 line (0.7.x; it stands in for a release of a newer line, :mod:`.stand_in`)."""

    line: ClassVar[str] = "0.7"
    first: ClassVar[str] = "0.7.0"
    server_types: ClassVar[tuple[str, ...]] = Gym06.server_types + ("environment_servers",)
    preload_modules: ClassVar[tuple[str, ...]] = Gym06.preload_modules + ("nemo_gym.base_environment_server",)
    # every 0.7.0 server's telemetry, and the model server's converter (imported after the fork, each
    # server held its own copy: docs/performance.md)
    preload_when_present: ClassVar[tuple[str, ...]] = (
        "nemo_gym.telemetry.contrib",
        "nemo_gym.telemetry.metrics",
        "nemo_gym.responses_converter",
    )
    declares_ray_enabled: ClassVar[bool] = True
    # the SDK's own Ray users a tree may import (nemo_gym/orchestration/ray_serve_gateway.py) and
    # the call that makes a driver (nemo_gym/server_utils.py)
    ray_modules: ClassVar[tuple[str, ...]] = Gym06.ray_modules + (
        "nemo_gym.orchestration.ray_serve_gateway",
        "nemo_gym.server_utils.initialize_ray",
        "nemo_gym.server_utils._get_ray",
    )
    reserved_keys: ClassVar[frozenset[str]] = Gym06.reserved_keys | {
        "environment_routing_mode",
        "environment_server_name",
        "environment_server_routes",
        "server_spinup_timeout_seconds",
        "uv_lock_timeout_seconds",
    }
    head_liveness_routes: ClassVar[tuple[str, ...]] = ("/livez",)
    head_readiness_routes: ClassVar[tuple[str, ...]] = ("/readyz", "/healthz", "/health")
    head_ready_status: ClassVar[str] = "ok"
    pairing_keys: ClassVar[tuple[str, ...]] = ("allowed_agents", "allowed_model_types")
    relay_implementation: ClassVar[str | None] = "legacy_agent"
    # rows reach agents through the environment server fronting them; materialized tasks
    # (`task_id` + `task_input`) go to `environment_server_routes[taskset]` as episode requests
    rows_through_environment_servers: ClassVar[bool] = True

    def server_uses_ray(self, sdk: bool, declared: bool | None, reaches_ray: bool) -> bool:
        """A server that declares ``ray_enabled = True`` gets a Ray driver, and an SDK server whose
        class declares nothing only when its tree imports Ray (``reaches_ray``,
        :mod:`gym_runtime.ray.imports`). NeMo Gym 0.7.0 gives every undeclared class one
        (with a warning that a future release defaults it to false); one that never calls Ray runs
        here without it, told by ``GYM_RUNTIME_NO_RAY_DRIVER`` (:mod:`gym_runtime.ray.switch`):
        no Ray head for it, no driver in its process, the host's best isolation (docs/runtime.md,
        "Ray"). When the release's metadata puts Ray under an extra (:attr:`ray_optional`), only a
        class that declares ``ray_enabled = True`` gets it, as that release does."""
        if self.ray_optional:
            return declared is True
        return declared is True or (sdk and declared is None and reaches_ray)
