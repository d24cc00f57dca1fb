"""The contract of the oldest NeMo Gym release line the runtime runs (0.2 to 0.5): the base profile.

A *profile* is one object per Gym release line saying what differs between lines; every other
module asks it and none compares version strings (docs/architecture.md §2, "Gym releases"). A
line's class overrides only what changed in that line (``gym_06.py``, ``gym_07.py``); a new Gym
release line is a new subclass registered in ``gym_release/__init__.py`` plus its tests.

The base values are those of NeMo Gym 0.4.0 (``nemo_gym/global_config.py``: the reserved
top-level keys and the composition rules, ``GlobalConfigDictParser``; ``nemo_gym/config_types.py``:
the server types; ``nemo_gym/cli/setup_command.py``: the SDK line of a server tree's install file). Releases 0.2.0-0.5.1 share them; 0.5 differs only
in figures the wheel itself declares (``Requires-Python >= 3.13.14``), which come from
:mod:`gym_runtime.known_releases` or the vendored wheel, not from the class.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from gym_runtime.known_releases import KnownRelease, newer_than_known_lines

if TYPE_CHECKING:
    from gym_runtime.settings import RuntimeSettings

SDK_NAME = "nemo-gym"
PIN_REQUIREMENTS = ("nemo-gym", "ray[default]", "openai")


class GymRelease:
    """The profile of one Gym release line, for one exact SDK version.

    Class attributes describe the line; instances add the exact release: ``version`` (the
    ``nemo-gym`` version the environment runs), ``source`` (where it was chosen from: a pin
    setting, the runtime's default, or ``wheels/<file>`` of the package) and ``metadata`` (the
    release's ``Requires-Python``, ``openai`` and ``ray[default]`` requirements: the vendored
    wheel's own ``METADATA``, else :data:`~gym_runtime.known_releases.RELEASES`).
    """

    line: ClassVar[str] = "0.4"
    # the first release of the line (lines are chosen by the newest `first` at or below a version)
    first: ClassVar[str] = "0.0"
    # Gym's server types (`nemo_gym/config_types.py`), in the order the runtime lists them
    server_types: ClassVar[tuple[str, ...]] = ("responses_api_models", "responses_api_agents", "resources_servers")
    # top-level keys Gym never reads as a server instance (`NEMO_GYM_RESERVED_TOP_LEVEL_KEYS`; 0.5's
    # additions are scalars, so the 0.4.0 list and 0.5.0's read the same configs alike)
    reserved_keys: ClassVar[frozenset[str]] = frozenset(
        {
            "config_paths",
            "entrypoint",
            "default_host",
            "head_server",
            "disallowed_ports",
            "head_server_deps",
            "python_version",
            "pip_install_verbose",
            "use_absolute_ip",
            "uv_pip_set_python",
            "skip_venv_if_present",
            "hf_token",
            "ray_head_node_address",
            "port_range_low",
            "port_range_high",
            "dry_run",
            "uv_cache_dir",
            "uv_venv_dir",
            "_inherit_from",
            "_copy",
            "nemo_gym_log_dir",
            "verbose",
            "json",
            "query",
            "component_name",
            "model_call_capture_dir",
            "model_endpoint_readiness_timeout_seconds",
            "observability_enabled",
        }
    )

    # whether servers of the line declare their Ray use (a `ray_enabled` class attribute, 0.7 and
    # later); before, `SimpleServer.run_webserver` calls `ray.init` in every SDK server
    declares_ray_enabled: ClassVar[bool] = False
    # what a server's tree imports when it calls Ray itself (gym_runtime/ray/imports.py)
    ray_modules: ClassVar[tuple[str, ...]] = ("ray",)
    # the SDK modules its servers import at start-up, imported once per venv by a preloaded parent
    # (sandbox/zygote.py): the server bases and what they pull in
    preload_modules: ClassVar[tuple[str, ...]] = (
        "nemo_gym.server_utils",
        "nemo_gym.base_resources_server",
        "nemo_gym.base_responses_api_agent",
        "nemo_gym.base_responses_api_model",
    )
    # SDK modules its servers import once they run, imported by the parent too where the venv has them
    # (a release of another line may have moved them: unlike preload_modules, none is required)
    preload_when_present: ClassVar[tuple[str, ...]] = ()

    # ---------------------------------------------------------------- composition (docs/environment-packages.md,
    # "Composition"; the mechanism is gym_runtime/config/compose.py, the rules per line below)
    # nested `config_paths`: False = an included file merges after (and so overrides) the file that named it
    # (`load_extra_config_paths`: breadth-first, includes appended in discovery order)
    includer_wins: ClassVar[bool] = False
    # a `config_paths` entry found nowhere is retried under its new name (`nemo_gym/_config_aliases.py`)
    config_path_aliases: ClassVar[Mapping[str, str]] = MappingProxyType({})
    # a legacy agent name routed to its new instance (`agent_map`) when only the new one exists
    agent_aliases: ClassVar[Mapping[str, str]] = MappingProxyType({})
    # an agent whose `resources_server.name` is `???` is moved onto every other agent (`compose_unbound_agent`)
    composes_unbound_agent: ClassVar[bool] = False
    # top-level `skip_verification` / `skip_verification_reward` are copied into every agent that sets neither
    applies_skip_verification: ClassVar[bool] = False
    # the keys of a resources server that refuse a pairing: `allowed_agents` (checked when the unbound agent is
    # composed) and `allowed_model_types` (every agent's model server); waived by `allow_unsupported_pairing`
    pairing_keys: ClassVar[tuple[str, ...]] = ()
    # the environment server implementation generated for an agent no environment server names (None: none)
    relay_implementation: ClassVar[str | None] = None
    # keys whose string value names a top-level block the server reads at run time, so the block's
    # secrets reach that server (gym_runtime/config/blocks.py): Gym's sandbox provider references
    # (NeMo Gym 0.5.0 and later `nemo_gym/sandbox/config.py`, `nemo_gym/sandbox/access.py`)
    block_reference_keys: ClassVar[tuple[str, ...]] = ("sandbox_provider", "provider_config_ref")
    # how dataset rows reach servers (gym_runtime/rollouts/routing.py): the 0.4 line's rows name their
    # agent with `agent_ref` and go to its `/run` (`nemo_gym/rollout_collection.py`)
    rows_name_task_source: ClassVar[bool] = False
    rows_through_environment_servers: ClassVar[bool] = False
    # the run-level routing a collection reads (gym_runtime/rollouts/rerouting.py): False = `agent_name`
    # only fills rows without `agent_ref`; True = `agent_map` (with `agent_name` as its `_default`)
    # re-routes every row and `fan_out` runs a row on several agents (`RolloutCollectionConfig`, 0.6.0)
    rows_rerouted_by_agent_map: ClassVar[bool] = False

    # ---------------------------------------------------------------- the head server
    # the head server's probe routes (Gym's `HeadServer`): liveness routes answer 200 `{"status": "ok"}`
    # whenever the head serves; readiness routes answer 503 `{"status": "starting"}` until every server
    # is ready, then 200 with `head_ready_status`. The 0.4 line's head has neither: `/health` is the
    # runtime's own, answering `ready` (docs/architecture.md §7.3)
    head_liveness_routes: ClassVar[tuple[str, ...]] = ()
    head_readiness_routes: ClassVar[tuple[str, ...]] = ("/health",)
    head_ready_status: ClassVar[str] = "ready"

    def __init__(self, version: str | Version, source: str, metadata: KnownRelease) -> None:
        self.version = Version(str(version))
        self.source = source
        self.metadata = metadata

    # ------------------------------------------------------------------ a release of a line the runtime does not know
    @property
    def release_line(self) -> str:
        """The release's own line: :attr:`line` for a release of a known line; ``major.minor`` (``0.8``)
        for a release newer than every line the runtime knows, which this profile stands in for."""
        return f"{self.version.major}.{self.version.minor}" if self.stand_in else self.line

    @property
    def stand_in(self) -> bool:
        """True when the release's line is newer than every line the runtime knows (0.8.0 while the
        newest known is 0.7): the newest profile stands in for it, its figures come only from its
        wheel (:func:`~gym_runtime.gym_release.choose.wheel_metadata`), and what the profile cannot
        honour is refused (:mod:`gym_runtime.config.stand_in`)."""
        return newer_than_known_lines(self.version)

    @property
    def ray_optional(self) -> bool:
        """True when the release's metadata puts Ray under an extra (``nemo-gym[ray]``) rather than
        among its own requirements: then only a server whose class declares ``ray_enabled = True``
        gets Ray, and only such a server's venv installs it (NeMo Gym after 0.7.0, "Upgrade from
        0.7.0 or Earlier")."""
        return self.metadata.ray_extra is not None

    # ------------------------------------------------------------------ figures of the exact release
    @property
    def requires_python(self) -> SpecifierSet:
        """The release's ``Requires-Python`` (e.g. ``>=3.13.14`` for 0.5 and later)."""
        return self.metadata.python_spec

    @property
    def openai_requirement(self) -> SpecifierSet:
        """The ``openai`` versions the release accepts (0.4.0: ``<=2.7.2``; 0.7.0: ``==2.44.0``)."""
        return SpecifierSet(self.metadata.openai)

    @property
    def ray_requirement(self) -> SpecifierSet:
        """The ``ray[default]`` versions the release accepts (0.7.0: ``>=2.58.0``)."""
        return SpecifierSet(self.metadata.ray)

    def runs_on(self, python_version: str) -> bool:
        """True when an interpreter of ``python_version`` (``3.13.15``) satisfies ``Requires-Python``."""
        return self.requires_python.contains(python_version, prereleases=True)

    def pins(self, settings: RuntimeSettings) -> tuple[dict[str, str], dict[str, str]]:
        """The image pins server venvs get for this release: ``(requirement -> version, requirement
        -> origin)``, the requirements of ``settings.pins``. A pin the operator set
        (``GYM_RUNTIME_PIN_*``) is kept as set; a default one is replaced: ``nemo-gym`` by this
        release and ``openai`` by the newest version it accepts, each saying so."""
        pins, origins = dict(settings.pins), dict(settings.pin_origins)
        if SDK_NAME in pins and not settings.pin_explicit(SDK_NAME):
            pins[SDK_NAME], origins[SDK_NAME] = str(self.version), f"the SDK this environment runs ({self.source})"
        if "openai" in pins and not settings.pin_explicit("openai"):
            if self.metadata.default_openai is None:  # no single version known: nemo-gym's own requirement decides
                del pins["openai"], origins["openai"]
            else:
                pins["openai"] = self.metadata.default_openai
                origins["openai"] = (
                    f"the runtime's default for nemo-gym {self.version} (the newest openai it accepts: "
                    f"{self.metadata.openai}{self._figures_from})"
                )
        return pins, origins

    @property
    def _figures_from(self) -> str:
        return f", read from {self.metadata.read_from}" if self.metadata.read_from else ""

    # ------------------------------------------------------------------ the line's contract
    @property
    def has_environment_servers(self) -> bool:
        """Whether ``environment_servers`` is a server type of this line (0.7 and later)."""
        return "environment_servers" in self.server_types

    def gym_starts_ray(self, sdk: bool, declared: bool | None) -> bool:
        """Whether NeMo Gym itself gives a server a Ray driver: ``sdk`` (its venv runs the Gym SDK)
        and ``declared`` (its entrypoint class's literal ``ray_enabled``, None when undeclared;
        :mod:`gym_runtime.package.server_class`). An SDK server of a line that does not declare
        always gets one (NeMo Gym 0.4.0 ``nemo_gym/server_utils.py``: ``run_webserver`` calls
        ``initialize_ray``), from 0.7 one whose class does not say ``ray_enabled = False``; any
        server that declares ``ray_enabled = True`` does, and, when the release's metadata puts Ray
        under an extra (:attr:`ray_optional`), only such a server."""
        if self.ray_optional:  # Ray is an extra of the release: only a class that declares it gets it
            return declared is True
        return declared is True or (sdk and (not self.declares_ray_enabled or declared is None))

    def server_uses_ray(self, sdk: bool, declared: bool | None, reaches_ray: bool) -> bool:
        """Whether the runtime gives a server a Ray driver: on this line as NeMo Gym does
        (:meth:`gym_starts_ray`; ``reaches_ray``, whether its tree imports Ray
        (:mod:`gym_runtime.ray.imports`), does not matter here)."""
        return self.gym_starts_ray(sdk, declared)

    def describe(self) -> str:
        """The one line commands print: ``gym release: NeMo Gym 0.7.0 (line 0.7, Requires-Python
        >=3.13.14; set by GYM_RUNTIME_PIN_NEMO_GYM)``; for a release of an unknown line it says so and
        which profile stands in: ``gym release: NeMo Gym 0.8.0 (line 0.8 is unknown to this runtime:
        the 0.7 profile stands in, with the pins of its own metadata; Requires-Python >=3.13.14; from
        wheels/nemo_gym-0.8.0-py3-none-any.whl)``."""
        if self.stand_in:
            figures = (
                "with the pins of its own metadata"
                if self.metadata.read_from
                else "its pins unknown until its wheel is installed (no wheel of it to read)"
            )
            line = f"line {self.release_line} is unknown to this runtime: the {self.line} profile stands in, {figures}"
        else:
            line = f"line {self.line}"
        python = str(self.requires_python) or "unknown"
        source = self.source if self.source.startswith("set by ") else f"from {self.source}"
        sep = "; " if self.stand_in else ", "
        return f"gym release: NeMo Gym {self.version} ({line}{sep}Requires-Python {python}; {source})"

    def to_dict(self) -> dict[str, str]:
        """JSON shape: ``version``, ``line`` (the release's own), ``source``, ``requires_python``,
        ``openai``, ``ray`` (specifiers; ``""`` when not known); for a release whose metadata puts Ray
        under an extra, ``ray_extra``; for a release of an unknown line, ``stand_in`` (the profile's
        line that runs it)."""
        out = {
            "version": str(self.version),
            "line": self.release_line,
            "source": self.source,
            "requires_python": str(self.requires_python),
            "openai": str(self.openai_requirement),
            "ray": str(self.ray_requirement),
        }
        if self.ray_optional:
            out["ray_extra"] = str(self.metadata.ray_extra)
        if self.stand_in:
            out["stand_in"] = self.line
        return out

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.version} from {self.source}>"
