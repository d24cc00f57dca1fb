"""The reserved ``placement:`` block of a server instance: what it asks of a Ray node (docs/scale-out.md).

Shape (inside the instance's implementation config, beside ``entrypoint``)::

    acme_math:
      resources_servers:
        acme_math:
          entrypoint: app.py
          domain: math
          placement:
            num_cpus: 1          # Ray logical CPUs per replica (default 0.5: four servers fit a 2-core node;
                                 # 0 for the runtime's built-in environment server, a relay)
            num_gpus: 0
            memory: 2GiB         # Ray logical memory per replica: bytes or a size string (pydantic ByteSize)
            resources: {judge_slots: 1}      # custom Ray resources per replica
            labels: {pool: cpu-heavy}        # Ray label selector: the node must carry these labels
            replicas: 2          # copies behind the instance's one stable address (1..64)
            retry_run_on_node_loss: false    # an agent's POST /run is safe to send again when the
                                             # node answering it was lost (default false: a /run may
                                             # have side effects)

No NeMo Gym config key is named ``placement`` (Gym's run configs allow extra keys, so servers
ignore it). Every key is optional; with ``--placement local`` (the default) the block is checked
but only ``replicas`` matters (more than one needs ``--placement ray``). Problems are
:class:`~gym_runtime.errors.Violation` s with code ``GR-CONFIG-PLACEMENT`` naming the file and
the key path, e.g. ``acme_math.resources_servers.acme_math.placement.num_cpus``. A label
selector's value syntax (``spot``, ``!spot``, ``in(a,b)``, ``!in(a,b)``) is Ray's and is checked by
Ray when the replica is placed.
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ByteSize, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails

from gym_runtime.config.sources import Sources
from gym_runtime.errors import Violation

KEY = "placement"
DEFAULT_NUM_CPUS = 0.5
RELAY_NUM_CPUS = 0.0  # the built-in relay reserves no CPU (default_num_cpus)
MAX_REPLICAS = 64
ANY_NODE_MEMORY = 1  # bytes: what a replica asking for nothing reserves (Placement.ray_options)
RAY_BUILTIN_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")


class Placement(BaseModel):
    """A validated ``placement:`` block (every field has a default; see the module doc).

    ``memory`` is in bytes (Ray's unit) or None (no memory reservation)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    num_cpus: float = Field(DEFAULT_NUM_CPUS, ge=0)
    num_gpus: float = Field(0, ge=0)
    memory: ByteSize | None = None
    resources: dict[str, float] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    replicas: int = Field(1, ge=1, le=MAX_REPLICAS)
    retry_run_on_node_loss: bool = False

    def retry_paths(self) -> frozenset[str]:
        """Paths whose ``POST`` the instance's stable address sends once more to another replica
        when the node answering it is lost (:mod:`gym_runtime.placement.router`): ``/run`` when
        ``retry_run_on_node_loss`` is declared, else none."""
        return frozenset({"/run"}) if self.retry_run_on_node_loss else frozenset()

    def ray_options(self) -> dict[str, Any]:
        """Actor options for one replica: ``num_cpus``, ``num_gpus``, ``memory``, ``resources``,
        ``label_selector`` (only those set)."""
        out: dict[str, Any] = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}
        if self.memory is not None:
            out["memory"] = int(self.memory)
        elif not (self.num_cpus or self.num_gpus or self.resources):
            # An actor asking for nothing is sent by Ray's GCS to a node it picks at random among
            # those it holds alive, without reading the label selector: after a node's loss that
            # can be the lost node, for the 10-20 s until Ray declares it dead. One byte of memory
            # (a resource every node has) sends it through the scheduler that reads the selector.
            out["memory"] = ANY_NODE_MEMORY
        if self.resources:
            out["resources"] = dict(self.resources)
        if self.labels:
            out["label_selector"] = dict(self.labels)
        return out


def placement_of(inner: dict[str, Any], num_cpus: float = DEFAULT_NUM_CPUS) -> Placement:
    """The block of one instance's (already checked) inner config; defaults when absent
    (``num_cpus``: the default of that key, :func:`default_num_cpus`)."""
    block = inner.get(KEY) or {}
    return Placement.model_validate(block if "num_cpus" in block else {**block, "num_cpus": float(num_cpus)})


def default_num_cpus(server_type: str, origin: str) -> float:
    """Ray logical CPUs a replica reserves when its block does not say: :data:`RELAY_NUM_CPUS` for
    the runtime's built-in environment server (the relay generated for an agent: it forwards each
    row to its agent and holds no work of its own), :data:`DEFAULT_NUM_CPUS` for every other
    server. ``origin``: the server tree's, ``"builtin"`` or ``"package"``."""
    return RELAY_NUM_CPUS if (server_type, origin) == ("environment_servers", "builtin") else DEFAULT_NUM_CPUS


def placement_problems(inner: dict[str, Any], key: str, sources: Sources) -> list[Violation]:
    """Violations of the ``placement`` block in the inner config at dotted ``key`` (empty when
    absent or valid): unknown keys (with a did-you-mean), wrong types, out-of-range numbers and
    Ray's built-in resource names under ``resources``."""
    if KEY not in inner:
        return []
    block, where = inner[KEY], f"{key}.{KEY}"
    if block is None:
        return []
    if not isinstance(block, dict):
        return [
            Violation(
                "GR-CONFIG-PLACEMENT",
                f"`{KEY}` must be a mapping of placement keys, got {type(block).__name__} {block!r}",
                file=sources.of(where),
                key=where,
                hint="e.g. placement: {num_cpus: 1, replicas: 2}; see docs/scale-out.md",
            )
        ]
    out: list[Violation] = []
    try:
        Placement.model_validate(block)
    except ValidationError as e:
        for err in e.errors():
            path = ".".join([where, *map(str, err["loc"])])
            out.append(_violation(err, path, sources.of(path)))
    resources = block.get("resources")
    for name in resources if isinstance(resources, dict) else ():
        if name in RAY_BUILTIN_RESOURCES:
            path = f"{where}.resources.{name}"
            field = {"CPU": "num_cpus", "GPU": "num_gpus"}.get(name, "memory")
            out.append(
                Violation(
                    "GR-CONFIG-PLACEMENT",
                    f"`{name}` is one of Ray's built-in resources, not a custom one",
                    file=sources.of(path),
                    key=path,
                    hint=f"use `{KEY}.{field}` instead",
                )
            )
    return out


def _violation(err: ErrorDetails, path: str, file: str | None) -> Violation:
    if err["type"] == "extra_forbidden":
        name = str(err["loc"][-1])
        near = difflib.get_close_matches(name, list(Placement.model_fields), n=1, cutoff=0.6)
        return Violation(
            "GR-CONFIG-PLACEMENT",
            f"unknown placement key `{name}`",
            file=file,
            key=path,
            hint=(f"did you mean `{near[0]}`? " if near else "") + f"known keys: {', '.join(Placement.model_fields)}",
        )
    return Violation(
        "GR-CONFIG-PLACEMENT",
        f"{err['msg']}, got {err.get('input')!r}",
        file=file,
        key=path,
        hint="see docs/scale-out.md for the placement keys and their types",
    )
