"""Runtime settings: the ONE module that reads environment variables.

Everything else receives a :class:`RuntimeSettings` value (httpx style: configuration is passed
down, never read from globals). Operator egress settings (``NMP_RL_SANDBOX_*``) are read by
``sandbox.policy.EgressPolicy.from_environ`` from the mapping this module hands it.

Variables (all optional):

==================================  =========================================================
``GYM_RUNTIME_HOME``                state root (default ``~/.cache/gym-runtime``): venvs, bytecode store, recorded resolutions, logs;
                                    also HOME when HOME is unusable (gym_runtime/inherited.py)
``GYM_RUNTIME_VENV_DIR``            venv root (default ``$GYM_RUNTIME_HOME/venvs``)
``GYM_RUNTIME_UV_CACHE_DIR``        uv cache (default: uv's own default cache)
``GYM_RUNTIME_PIN_MODE``            ``gym`` | ``auto`` (default) | ``none`` (docs/architecture.md §5)
``GYM_RUNTIME_PIN_NEMO_GYM``        image pin for ``nemo-gym`` (default: the current Gym release, 0.7.0); it
                                    also chooses the Gym release profile (:mod:`gym_runtime.gym_release`)
``GYM_RUNTIME_PIN_RAY``             image pin for ``ray[default]`` (default: this runtime's ray, else 2.60.0;
                                    servers join the runtime's Ray cluster, so versions must match)
``GYM_RUNTIME_PIN_OPENAI``          image pin for ``openai`` (default: the newest openai the pinned nemo-gym
                                    accepts: 2.44.0 for 0.7.0, 2.7.2 for 0.4.0; the runtime's own openai
                                    is no valid default, case C07)
``GYM_RUNTIME_PYTHON``              default interpreter for server venvs (version or path;
                                    default: the runtime's own ``X.Y``, or for servers using the Gym
                                    SDK one that meets the release's Requires-Python, docs/runtime.md)
``GYM_RUNTIME_VENDOR_PLATFORM``     ``vendor``'s target platform when ``--platform`` is not given
                                    (``linux/amd64`` | ``linux/arm64``; each runtime image sets its own)
``GYM_RUNTIME_POLICY_BASE_URL``     the job's policy endpoint(s), comma-separated for replicas
``GYM_RUNTIME_POLICY_API_KEY``      the policy endpoint's API key
``GYM_RUNTIME_POLICY_MODEL_NAME``   the served model name
``GYM_RUNTIME_SERVER_MEMORY_MB``    memory limit of each server's process tree, MB (default: half
                                    of this host's memory; ``0``: none), docs/runtime.md
``GYM_RUNTIME_SERVER_PIDS``         process/thread limit of each server (default 4096; ``0``: none)
``NEMO_GYM_ALLOW_UNSUPPORTED_PAIRING``  NeMo Gym's own switch, read as Gym reads it (set and not ``0`` /
                                    ``false``): the config stage runs pairings a resources server's
                                    ``allowed_agents`` / ``allowed_model_types`` refuse (docs/environment-packages.md)
``GYM_RUNTIME_SERVER_ENV``          variables passed from the daemon's environment into server processes:
                                    a comma list of ``NAME`` (every server) and ``INSTANCE:NAME`` (that
                                    server instance only), docs/architecture.md §7.1
``GYM_RUNTIME_WRITABLE_TREES``      instance names (comma list, ``*``: all) whose server tree is a writable
                                    copy-on-write view (docs/runtime.md, "Sandbox and egress")
``GYM_RUNTIME_PRELOAD``             ``on`` (default) | ``off``: the servers of one venv are forked from one
                                    parent that imported their shared modules once (bubblewrap only;
                                    docs/architecture.md, "Preloaded parents")
``GYM_RUNTIME_RAY_UNDECLARED``      what a NeMo Gym 0.7 server whose class declares no ``ray_enabled`` gets:
                                    ``when-imported`` (default: a Ray driver only when its tree imports
                                    Ray) | ``always`` (a driver, as NeMo Gym 0.7.0 gives it), docs/runtime.md "Ray"
``GYM_RUNTIME_SANDBOX_BACKEND``     where servers run sandboxed: ``local`` (default: namespaces and
                                    bubblewrap on this host) | ``opensandbox`` (the operator's OpenSandbox
                                    server); ``--sandbox-backend`` wins (docs/runtime.md, "Sandbox backends")
``OPENSANDBOX_DOMAIN``              the OpenSandbox server's ``host:port`` (backend ``opensandbox``)
``OPENSANDBOX_API_KEY``             its API key: kept out of every log, command line and server environment
``OPENSANDBOX_PROTOCOL``            ``http`` (default) | ``https``
``GYM_RUNTIME_OPENSANDBOX_IMAGE``   the image servers run in under ``opensandbox`` (required there)
``GYM_RUNTIME_OPENSANDBOX_CPU``     CPUs of each server's sandbox (default ``1``)
``GYM_RUNTIME_OPENSANDBOX_DAEMON_HOST``  the IP address sandboxes reach this daemon at (required
                                    there: the bridge's gateway for a docker/podman runtime, the pod IP on
                                    Kubernetes)
``GYM_RUNTIME_OPENSANDBOX_EGRESS``  ``enforced`` (default: the allowlist is each sandbox's networkPolicy) |
                                    ``unenforced`` (a server without an egress sidecar; said loudly)
``GYM_RUNTIME_OPENSANDBOX_OUTAGE_S``  seconds a server whose sandbox must be made again waits for an
                                    unreachable OpenSandbox server before it fails (default ``600``, the
                                    sandboxes' TTL; docs/runtime.md "Lifecycle")
``GYM_RUNTIME_OPENSANDBOX_CREATES_IN_FLIGHT``  sandbox creates on the OpenSandbox server at once (default ``8``;
                                    docs/runtime.md "Many sandboxes at once")
``GYM_RUNTIME_OPENSANDBOX_CREATES_PER_S``  sandbox creates started per second at most (default ``4``)
``GYM_RUNTIME_OPENSANDBOX_TASK_IMAGES``  images task sandboxes on the OpenSandbox server may run: a comma
                                    list of images and of prefixes ending in ``/`` (unset: none, every
                                    create refused; :mod:`gym_runtime.task_sandboxes.approval`)
``GYM_RUNTIME_OPENSANDBOX_VOLUME``  the claim name of the volume the daemon sees mounted at ``GYM_RUNTIME_HOME``
                                    (a Kubernetes PVC; a named volume under a docker runtime): servers'
                                    sandboxes get trees, venvs and work directories from it, never by host
                                    path (unset: host paths; docs/runtime.md "Delivery modes")
``GYM_RUNTIME_SANDBOX_*``           task sandboxes: provider choice, images, limits
                                    (:mod:`gym_runtime.task_sandboxes.settings`)
==================================  =========================================================

The module is long because it is the one place environment variables are read: every setting,
its parse and its error stay side by side.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gym_runtime.errors import SettingsError

PIN_MODES = ("gym", "auto", "none")
VENDOR_PLATFORMS = ("linux/amd64", "linux/arm64")
RAY_UNDECLARED = ("when-imported", "always")  # GYM_RUNTIME_RAY_UNDECLARED, the default first
DEFAULT_SERVER_PIDS = 4096
PIN_VARS = {
    "nemo-gym": "GYM_RUNTIME_PIN_NEMO_GYM",
    "ray[default]": "GYM_RUNTIME_PIN_RAY",
    "openai": "GYM_RUNTIME_PIN_OPENAI",
}
SERVER_ENV_VAR = "GYM_RUNTIME_SERVER_ENV"
# What GYM_RUNTIME_SERVER_ENV cannot pass: the variables the server process contract sets itself
# (gym_runtime/supervise/contract.py; a test holds the two together), and whole families the runtime
# owns (its settings, the operator's egress, Ray's and uv's, the interpreter's and the loader's).
SERVER_ENV_RESERVED = frozenset(
    {
        "PATH",
        "VIRTUAL_ENV",
        "HOME",
        "TMPDIR",
        "LANG",
        "NEMO_GYM_CONFIG_DICT",
        "NEMO_GYM_CONFIG_PATH",
        "HF_HOME",
        "HF_DATASETS_CACHE",
        "TOKENIZERS_PARALLELISM",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "all_proxy",
    }
)
SERVER_ENV_RESERVED_PREFIXES = ("GYM_RUNTIME_", "NMP_RL_SANDBOX_", "RAY_", "UV_", "PYTHON", "LD_", "OPENSANDBOX_")
SANDBOX_BACKENDS = ("local", "opensandbox")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_INSTANCE_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_CLAIM_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # opensandbox-server 1.1.1's PVC.claimName


def builtin_servers_dir() -> Path:
    """The built-in Gym server trees shipped with the runtime (``servers/`` beside ``gym_runtime/``)."""
    return Path(__file__).resolve().parent.parent / "servers"


def _installed(dist: str, default: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return default


@dataclass(frozen=True)
class RuntimeSettings:
    """Settings for one run. ``pins`` maps requirement names (``nemo-gym``, ``ray[default]``,
    ``openai``) to exact versions and ``pin_origins`` says where each came from (for errors,
    case C07); ``environ`` is the environment snapshot the run started with (handed to the
    sandbox policy and scrubbed before any uv call); ``server_env``: the variables passed into
    server processes, ``(name, instance)`` pairs, ``instance`` None for every server
    (:data:`SERVER_ENV_VAR`, :mod:`gym_runtime.supervise.passthrough`)."""

    home: Path
    venv_dir: Path
    uv_cache_dir: Path | None
    pin_mode: str
    pins: dict[str, str]
    python: str
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)
    pin_origins: dict[str, str] = field(default_factory=dict)
    server_memory_mb: int | None = None
    server_pids: int | None = DEFAULT_SERVER_PIDS
    vendor_platform: str | None = None
    python_explicit: bool = False  # the operator set GYM_RUNTIME_PYTHON (else `python` is the runtime's own X.Y)
    allow_unsupported_pairing: bool = False
    server_env: tuple[tuple[str, str | None], ...] = ()
    task_sandboxes: Any = None  # gym_runtime.task_sandboxes.settings.TaskSandboxSettings
    writable_trees: frozenset[str] = frozenset()  # instance names, or {"*"}
    token_capture_dir: Path | None = None  # GYM_RUNTIME_TOKEN_CAPTURE_DIR (gym_runtime/config/token_capture.py)
    sandbox_backend: str = "local"  # GYM_RUNTIME_SANDBOX_BACKEND / --sandbox-backend (SANDBOX_BACKENDS)
    opensandbox: Any = None  # sandbox.opensandbox.connection.OpenSandboxConnection, when its variables are set
    preload: bool = True  # GYM_RUNTIME_PRELOAD (sandbox/zygote.py)
    ray_undeclared: str = "when-imported"  # GYM_RUNTIME_RAY_UNDECLARED (RAY_UNDECLARED; ray/use.py)

    def writable_tree(self, instance: str) -> bool:
        """Whether ``instance``'s server tree is a copy-on-write view (``GYM_RUNTIME_WRITABLE_TREES``)."""
        return instance in self.writable_trees or "*" in self.writable_trees

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def bytecode_dir(self) -> Path:
        """The bytecode store (venvs/pyc_store.py): beside the venv root, never inside it."""
        return self.home / "bytecode"

    @property
    def resolutions_dir(self) -> Path:
        """What stage 1 installed per venv plan (venvs/resolutions.py): beside the venv root."""
        return self.home / "resolutions"

    def pin_explicit(self, requirement: str) -> bool:
        """True when the operator set this pin (``GYM_RUNTIME_PIN_*``) rather than a default."""
        return self.pin_origins.get(requirement, "").startswith("set by ")

    def with_overrides(self, **kw: object) -> RuntimeSettings:
        """A copy with some fields replaced (CLI flags win over the environment)."""
        return replace(self, **kw)  # type: ignore[arg-type]  # dataclasses.replace checks the field names and the fields their types


def user_home(env: Mapping[str, str], what: str = "the state root (~/.cache/gym-runtime)") -> Path:
    """HOME, else the passwd entry's home; :class:`SettingsError` ``GR-INHERITED-HOME`` when neither
    exists (a uid with no passwd entry, case C69), naming ``what`` could not be derived and the
    variable to set. ``up``, ``dry-run`` and ``build`` set HOME first (gym_runtime/inherited.py)."""
    if env.get("HOME"):
        return Path(env["HOME"])
    try:
        return Path.home()
    except RuntimeError:
        raise SettingsError(
            f"HOME is unset and uid {os.getuid()} has no passwd entry: {what} cannot be derived",
            code="GR-INHERITED-HOME",
            hint="set GYM_RUNTIME_HOME to a writable directory (the uv cache then goes under it), or HOME",
        ) from None


def load_settings(environ: Mapping[str, str] | None = None) -> RuntimeSettings:
    """Read settings from ``environ`` (default ``os.environ``); raises :class:`SettingsError`."""
    env = dict(os.environ if environ is None else environ)
    home = Path(env.get("GYM_RUNTIME_HOME") or user_home(env) / ".cache" / "gym-runtime").expanduser()
    mode = env.get("GYM_RUNTIME_PIN_MODE", "auto")
    if mode not in PIN_MODES:
        raise SettingsError(
            f"GYM_RUNTIME_PIN_MODE={mode!r} is not one of {', '.join(PIN_MODES)}",
            hint="unset it for the default (auto)",
        )
    from gym_runtime.known_releases import CURRENT, known_release

    sdk = env.get(PIN_VARS["nemo-gym"]) or CURRENT
    try:  # a release of an unknown line has no known openai: its profile drops this default (GymRelease.pins)
        openai = known_release(sdk).default_openai or known_release(CURRENT).default_openai or ""
    except ValueError:  # not a version: the release profile's choice reports it (GR-SETTINGS-PIN)
        openai = known_release(CURRENT).default_openai or ""  # the current release's row always names one
    defaults = {
        "nemo-gym": (CURRENT, "the runtime's default: the current NeMo Gym release"),
        "ray[default]": (
            _installed("ray", "2.60.0"),
            "the runtime's default (the ray version it runs with, so servers can join its cluster)",
        ),
        "openai": (openai, f"the runtime's default (the newest openai nemo-gym {sdk} accepts)"),
    }
    pins, origins = {}, {}
    for req, var in PIN_VARS.items():
        if env.get(var):
            pins[req], origins[req] = env[var], f"set by {var}"
        else:
            pins[req], origins[req] = defaults[req]
    cache = env.get("GYM_RUNTIME_UV_CACHE_DIR")
    memory = _limit(env, "GYM_RUNTIME_SERVER_MEMORY_MB", _half_of_memory_mb())
    pids = _limit(env, "GYM_RUNTIME_SERVER_PIDS", DEFAULT_SERVER_PIDS)
    vendor_platform = env.get("GYM_RUNTIME_VENDOR_PLATFORM") or None
    if vendor_platform is not None and vendor_platform not in VENDOR_PLATFORMS:
        raise SettingsError(
            f"GYM_RUNTIME_VENDOR_PLATFORM={vendor_platform!r} is not one of {', '.join(VENDOR_PLATFORMS)}",
            hint="unset it to require `vendor --platform`",
        )
    from gym_runtime.task_sandboxes.settings import load as load_task_sandboxes

    capture = env.get("GYM_RUNTIME_TOKEN_CAPTURE_DIR") or None
    if capture is not None and not Path(capture).is_absolute():
        raise SettingsError(
            f"GYM_RUNTIME_TOKEN_CAPTURE_DIR={capture!r} is not an absolute path",
            code="GR-SETTINGS-TOKEN-CAPTURE-DIR",
            hint="give the absolute directory the model servers write token ids to and the trainer "
            "reads (node-local), or unset it",
        )

    backend = check_sandbox_backend(env.get("GYM_RUNTIME_SANDBOX_BACKEND") or "local", "GYM_RUNTIME_SANDBOX_BACKEND")
    preload = (env.get("GYM_RUNTIME_PRELOAD") or "on").strip().lower()
    if preload not in ("on", "off"):
        raise SettingsError(
            f"GYM_RUNTIME_PRELOAD={preload!r} is neither `on` nor `off`",
            code="GR-SETTINGS-PRELOAD",
            hint="`off` starts every server on its own; unset it for the default (`on`)",
        )
    undeclared = (env.get("GYM_RUNTIME_RAY_UNDECLARED") or RAY_UNDECLARED[0]).strip().lower()
    if undeclared not in RAY_UNDECLARED:
        raise SettingsError(
            f"GYM_RUNTIME_RAY_UNDECLARED={undeclared!r} is not one of {', '.join(RAY_UNDECLARED)}",
            code="GR-SETTINGS-RAY-UNDECLARED",
            hint="`always` gives every Gym server whose class declares no ray_enabled a Ray driver, "
            "as NeMo Gym does; unset it for the default (only when its tree imports Ray)",
        )
    return RuntimeSettings(
        home=home,
        venv_dir=Path(env.get("GYM_RUNTIME_VENV_DIR") or home / "venvs").expanduser(),
        uv_cache_dir=Path(cache).expanduser() if cache else None,
        pin_mode=mode,
        pins=pins,
        pin_origins=origins,
        python=env.get("GYM_RUNTIME_PYTHON") or f"{sys.version_info[0]}.{sys.version_info[1]}",
        python_explicit=bool(env.get("GYM_RUNTIME_PYTHON")),
        environ=env,
        server_memory_mb=memory,
        server_pids=pids,
        vendor_platform=vendor_platform,
        allow_unsupported_pairing=env.get("NEMO_GYM_ALLOW_UNSUPPORTED_PAIRING", "").lower() not in ("", "0", "false"),
        server_env=parse_server_env(env.get(SERVER_ENV_VAR, "")),
        task_sandboxes=load_task_sandboxes(env, home),
        writable_trees=frozenset(x.strip() for x in env.get("GYM_RUNTIME_WRITABLE_TREES", "").split(",") if x.strip()),
        token_capture_dir=Path(capture) if capture else None,
        sandbox_backend=backend,
        opensandbox=opensandbox_connection(env, home),
        preload=preload == "on",
        ray_undeclared=undeclared,
    )


def check_sandbox_backend(name: str, where: str) -> str:
    """``name`` when it is one of :data:`SANDBOX_BACKENDS`; raises :class:`SettingsError`
    (``GR-SETTINGS-SANDBOX-BACKEND``) naming ``where`` it came from (the variable or the flag)."""
    if name not in SANDBOX_BACKENDS:
        raise SettingsError(
            f"{where}={name!r} is not one of {', '.join(SANDBOX_BACKENDS)}",
            code="GR-SETTINGS-SANDBOX-BACKEND",
            hint="use local (namespaces on this host, the "
            "default) or opensandbox (the operator's OpenSandbox server: set OPENSANDBOX_DOMAIN, "
            "OPENSANDBOX_API_KEY and GYM_RUNTIME_OPENSANDBOX_IMAGE)",
        )
    return name


def opensandbox_connection(env: Mapping[str, str], home: Path | None = None) -> Any:
    """The OpenSandbox connection (:class:`sandbox.opensandbox.connection.OpenSandboxConnection`)
    from ``OPENSANDBOX_*`` and ``GYM_RUNTIME_OPENSANDBOX_*``, ``home`` the state root (where the
    volume of ``GYM_RUNTIME_OPENSANDBOX_VOLUME`` is mounted); None when ``OPENSANDBOX_DOMAIN`` is
    unset. Raises :class:`SettingsError` (``GR-SETTINGS-OPENSANDBOX``) for a bad protocol or CPU
    count. Whether the server answers is checked when a run starts (``doctor`` asks it too)."""
    domain = (env.get("OPENSANDBOX_DOMAIN") or "").strip()
    if not domain:
        return None
    from sandbox.opensandbox.connection import OpenSandboxConnection

    protocol = env.get("OPENSANDBOX_PROTOCOL") or "http"
    if protocol not in ("http", "https"):
        raise SettingsError(
            f"OPENSANDBOX_PROTOCOL={protocol!r} is not http or https",
            code="GR-SETTINGS-OPENSANDBOX",
            hint="unset it for http",
        )
    cpu = env.get("GYM_RUNTIME_OPENSANDBOX_CPU") or "1"
    try:
        ok = float(cpu) > 0
    except ValueError:
        ok = False
    if not ok:
        raise SettingsError(
            f"GYM_RUNTIME_OPENSANDBOX_CPU={cpu!r} is not a number of CPUs > 0",
            code="GR-SETTINGS-OPENSANDBOX",
            hint="e.g. 1 or 0.5; unset it for 1",
        )
    daemon_host = (env.get("GYM_RUNTIME_OPENSANDBOX_DAEMON_HOST") or "").strip() or None
    if daemon_host is not None:
        import ipaddress

        try:
            ipaddress.ip_address(daemon_host)
        except ValueError:
            raise SettingsError(
                f"GYM_RUNTIME_OPENSANDBOX_DAEMON_HOST={daemon_host!r} is not an IP address",
                code="GR-SETTINGS-OPENSANDBOX",
                hint="give this host's address on the sandboxes' "
                "network (it becomes an allow rule of their networkPolicy)",
            ) from None
    egress = env.get("GYM_RUNTIME_OPENSANDBOX_EGRESS") or "enforced"
    if egress not in ("enforced", "unenforced"):
        raise SettingsError(
            f"GYM_RUNTIME_OPENSANDBOX_EGRESS={egress!r} is not enforced or unenforced",
            code="GR-SETTINGS-OPENSANDBOX",
            hint="unset it: the allowlist is enforced by the server's egress sidecar",
        )
    outage = env.get("GYM_RUNTIME_OPENSANDBOX_OUTAGE_S") or "600"
    try:
        outage_s = float(outage)
    except ValueError:
        outage_s = -1.0
    if not 0 < outage_s < float("inf"):
        raise SettingsError(
            f"GYM_RUNTIME_OPENSANDBOX_OUTAGE_S={outage!r} is not a number of seconds > 0",
            code="GR-SETTINGS-OPENSANDBOX",
            hint="e.g. 900; unset it for 600 (the sandboxes' TTL)",
        )
    in_flight = _positive(env, "GYM_RUNTIME_OPENSANDBOX_CREATES_IN_FLIGHT", "8", whole=True)
    per_s = _positive(env, "GYM_RUNTIME_OPENSANDBOX_CREATES_PER_S", "4", whole=False)
    from gym_runtime.task_sandboxes.approval import SETTING, ApprovedImages

    try:
        task_images = ApprovedImages.parse(env.get(SETTING) or "")
    except ValueError as e:
        raise SettingsError(
            f"{SETTING}: {e}",
            code="GR-SETTINGS-OPENSANDBOX",
            hint="give images (registry.example/team/task:1) and prefixes ending in '/' "
            "(registry.example/team/), comma-separated",
        ) from None
    volume = (env.get("GYM_RUNTIME_OPENSANDBOX_VOLUME") or "").strip() or None
    if volume is not None and (len(volume) > 253 or not _CLAIM_NAME.match(volume)):
        raise SettingsError(
            f"GYM_RUNTIME_OPENSANDBOX_VOLUME={volume!r} is not a volume claim name",
            code="GR-SETTINGS-OPENSANDBOX",
            hint="give the name of the PersistentVolumeClaim (a named volume under a docker runtime) "
            "mounted at GYM_RUNTIME_HOME: lower-case letters, digits and '-', at most 253; or unset it",
        )
    return OpenSandboxConnection(
        domain=domain,
        api_key=env.get("OPENSANDBOX_API_KEY") or None,
        protocol=protocol,
        image=env.get("GYM_RUNTIME_OPENSANDBOX_IMAGE") or None,
        cpu=cpu,
        daemon_host=daemon_host,
        egress=egress,
        task_images=task_images,
        outage_s=outage_s,
        creates_in_flight=int(in_flight),
        creates_per_s=per_s,
        volume=volume,
        state_root=Path(home).expanduser() if volume is not None and home is not None else None,
    )


def _positive(env: Mapping[str, str], name: str, default: str, *, whole: bool) -> float:
    """Setting ``name`` (``default`` when unset) as a number > 0, a whole one when ``whole``;
    raises :class:`SettingsError` (``GR-SETTINGS-OPENSANDBOX``) naming it otherwise."""
    raw = (env.get(name) or "").strip() or default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf") or (whole and not value.is_integer()):
        raise SettingsError(
            f"{name}={raw!r} is not a {'whole ' if whole else ''}number > 0",
            code="GR-SETTINGS-OPENSANDBOX",
            hint=f"e.g. {default}; unset it for {default}",
        )
    return value


def parse_server_env(raw: str) -> tuple[tuple[str, str | None], ...]:
    """:data:`SERVER_ENV_VAR`'s comma list as ``(name, instance | None)`` pairs, in order, without
    repeats. Raises :class:`SettingsError` (``GR-SETTINGS-SERVER-ENV``) for an entry that is not a
    variable name (or ``INSTANCE:NAME``), or names a variable the runtime sets or owns."""
    out: list[tuple[str, str | None]] = []
    for entry in (e.strip() for e in raw.split(",")):
        if not entry:
            continue
        instance, _, name = entry.rpartition(":")
        if not _ENV_NAME.match(name) or (instance and not _INSTANCE_NAME.match(instance)) or entry.startswith(":"):
            raise SettingsError(
                f"{SERVER_ENV_VAR}: {entry!r} is neither a variable name nor INSTANCE:NAME",
                code="GR-SETTINGS-SERVER-ENV",
                hint=f"write {SERVER_ENV_VAR}=OPENROUTER_API_KEY,"
                "my_judge:JUDGE_TOKEN (names only: the values are read from this environment)",
            )
        if name in SERVER_ENV_RESERVED or name.startswith(SERVER_ENV_RESERVED_PREFIXES):
            raise SettingsError(
                f"{SERVER_ENV_VAR}: {name} is set or owned by gym-runtime for every server, so it "
                "cannot be passed through",
                code="GR-SETTINGS-SERVER-ENV",
                hint=f"remove {name} from {SERVER_ENV_VAR} (docs/architecture.md §7.1 lists what each server gets)",
            )
        pair = (name, instance or None)
        if pair not in out:
            out.append(pair)
    return tuple(out)


def _half_of_memory_mb() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2 // 2**20
    except (ValueError, OSError):
        return None


def _limit(env: Mapping[str, str], var: str, default: int | None) -> int | None:
    """A per-server limit: a whole number, ``0`` for none; unset: ``default``."""
    raw = env.get(var)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise SettingsError(
            f"{var}={raw!r} is not a whole number >= 0", hint=f"unset {var} for the default, or set 0 for no limit"
        )
    return value or None
