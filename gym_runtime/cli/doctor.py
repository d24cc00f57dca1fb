"""``gym-runtime doctor [--json]``: what this host can give before anything starts.

Reports: the isolation level available and why (sandbox probe), the Pythons found, uv's version,
the venv and uv cache directories (writable?), the index uv would use, Ray (the target ``up``
would choose and whether it answers), the egress policy in force with its *effective allowlist*:
every entry a sandboxed server may reach and where it comes from (built-in, the policy endpoints
of ``GYM_RUNTIME_POLICY_BASE_URL``, the operator's ``NMP_RL_SANDBOX_*``), when a daemon runs on
this ``$GYM_RUNTIME_HOME`` its processes by role and size (its head server's ``/processes``), and
the variables ``GYM_RUNTIME_SERVER_ENV`` passes into servers (names only, and whether each is set),
and with ``--package PKG`` the secret keys each server instance of that package receives and the
variables it is passed (names only, docs/architecture.md §4, §7.1) and the Gym release it runs and
why (docs/runtime.md, "Gym releases"), and the sandbox backends: which one runs servers
(``GYM_RUNTIME_SANDBOX_BACKEND``), the isolation each gives, and for ``opensandbox`` the server,
its version and whether it accepts the key (docs/runtime.md, "Sandbox backends"). Each interpreter found is listed with the known Gym releases
it can run (their ``Requires-Python``), and pip index settings that uv ignores are named with uv's
equivalent. Exit 0 when every check is fine; 1 when a setting (or the ``--package``)
is invalid input (README "Exit codes"); 3 when the host falls short (e.g. a directory that cannot
be written, Ray unreachable).

The module is long because it reports on every part of the host a start depends on; each part is
one short function here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from gym_runtime.errors import EXIT_INVALID, EXIT_RUNTIME, GymRuntimeError
from gym_runtime.settings import RuntimeSettings, load_settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="check what this host offers: isolation, Pythons, uv, dirs, index, Ray, egress")
    p.add_argument("--ray-address", metavar="ADDR", help="check this Ray address instead of RAY_ADDRESS")
    p.add_argument(
        "--package",
        metavar="PKG",
        help="also show the Gym release PKG runs (and why) and which secret keys each server of PKG receives",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def _writable(path: Path) -> dict[str, Any]:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    ok = os.access(probe, os.W_OK)
    return {"path": str(path), "exists": path.exists(), "writable": ok, "status": "ok" if ok else "error"}


def _uv(settings: RuntimeSettings) -> dict[str, Any]:
    import uv

    from gym_runtime.venvs.pip_settings import ignored_pip_indexes

    exe = uv.find_uv_bin()
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10)
    cache = settings.uv_cache_dir
    if cache is None:
        res = subprocess.run([exe, "cache", "dir"], capture_output=True, text=True, timeout=10)
        cache = Path(res.stdout.strip()) if res.returncode == 0 else None
    env = settings.environ
    index = env.get("UV_DEFAULT_INDEX") or env.get("UV_INDEX_URL") or "https://pypi.org/simple (uv default)"
    return {
        "binary": exe,
        "version": out.stdout.strip(),
        "cache_dir": _writable(cache) if cache else None,
        "index": index,
        "extra_index": env.get("UV_EXTRA_INDEX_URL") or env.get("UV_INDEX"),
        "offline": env.get("UV_OFFLINE") not in (None, "", "0", "false"),
        "pip_settings_ignored": [s.describe() for s in ignored_pip_indexes(env)],
    }


def _ray(flag: str | None, settings: RuntimeSettings) -> dict[str, Any]:
    from gym_runtime.ray.target import choose, wait_reachable
    from sandbox.backends import ray_scope

    try:
        target = choose(flag, None, settings.environ, [], ray_scope(settings.sandbox_backend))
    except GymRuntimeError as e:
        return {"status": "error", "error": e.to_dict(), "invalid_input": e.exit_code == EXIT_INVALID}
    out: dict[str, Any] = {"status": "ok", **target.to_dict(), "summary": target.describe().removeprefix("ray: ")}
    if target.mode == "join" and target.address is not None:
        try:
            wait_reachable(target.address, target.source, 3.0)
            out["reachable"] = True
        except GymRuntimeError as e:
            out.update(status="error", reachable=False, error=e.to_dict())
    return out


def _package(package: str, settings: RuntimeSettings) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(gym release, secrets)`` of ``package``: the Gym release it runs and why it was chosen
    (:func:`~gym_runtime.gym_release.choose_release`), and per server instance the dotted keys of
    the secrets it receives (the job's policy values from ``GYM_RUNTIME_POLICY_*``, else
    placeholders: only names are shown) and the variables ``GYM_RUNTIME_SERVER_ENV`` passes it
    (names, and whether each is set)."""
    from gym_runtime.cli.validate import PLACEHOLDERS
    from gym_runtime.config import build_config
    from gym_runtime.config.merge import PolicyValues
    from gym_runtime.gym_release import choose_release
    from gym_runtime.package import load_package
    from gym_runtime.supervise import passthrough

    def error(e: GymRuntimeError) -> dict[str, Any]:
        return {"status": "error", "error": e.to_dict(), "invalid_input": e.exit_code == EXIT_INVALID}

    try:
        pkg = load_package(package)
        release = choose_release(pkg, settings)
    except GymRuntimeError as e:
        return error(e), error(e)
    chosen = {
        "status": "ok",
        **release.to_dict(),
        "summary": release.describe().removeprefix("gym release: "),
        "why": _why(release.source),
    }
    try:
        merged = build_config(pkg, [], PolicyValues.from_environ(), defaults=PLACEHOLDERS, release=release)
        passthrough.check(settings, merged.instances)
    except GymRuntimeError as e:
        return chosen, error(e)
    return chosen, {
        "status": "ok",
        "servers": {n: merged.secrets.keys_for(n, merged.data) for n in merged.instances},
        "passed_env": passthrough.describe(settings, merged.instances),
    }


def _why(source: str) -> str:
    """Why a release was chosen, from its source (docs/runtime.md, "Gym releases")."""
    if source.startswith("wheels/"):
        return f"the package vendors the SDK as {source}: it runs that release"
    if source.startswith("set by "):
        return f"no nemo_gym wheel in the package, and the operator pinned it ({source})"
    return "no nemo_gym wheel in the package and no GYM_RUNTIME_PIN_NEMO_GYM: the current release"


def _releases_of(version: str) -> list[str]:
    """The known Gym releases an interpreter of ``version`` can run (their Requires-Python)."""
    from gym_runtime.gym_release import RELEASES

    return [r.version for r in RELEASES if r.python_spec.contains(version, prereleases=True)]


def _pythons(settings: Any) -> list[Any]:
    """The interpreters found on this host, and the one ``GYM_RUNTIME_PYTHON`` names (source
    ``GYM_RUNTIME_PYTHON``) where the search does not find it."""
    from dataclasses import replace

    from gym_runtime.venvs.pythons import find_python, list_pythons

    found = list_pythons(settings.environ)
    if settings.python_explicit:
        try:
            chosen = find_python(settings.python, settings.environ)
        except GymRuntimeError:  # `up` says why, with the fix; doctor lists what it can run
            return found
        if all(i.path != chosen.path for i in found):
            found.append(replace(chosen, source="GYM_RUNTIME_PYTHON"))
    return found


def _no_current_python(pythons: list[dict]) -> list[str]:
    """The hint line when no interpreter found runs the default Gym release, else none."""
    from gym_runtime.gym_release import CURRENT, known_release

    if any(CURRENT in p["gym_releases"] for p in pythons):
        return []
    spec = known_release(CURRENT).python_spec
    return [
        f"hint: none runs NeMo Gym {CURRENT} (the default release; Python {spec}), which servers using the "
        "Gym SDK need: install one (e.g. `uv python install 3.13`, `./uvw python install 3.13` in a checkout of "
        "this repository; this search finds it) and give it with --python or GYM_RUNTIME_PYTHON (a version or "
        "a path; gym-runtime never downloads Python); packages of built-in servers only, like the bundled "
        "example, run on any of these"
    ]


def _ranges(versions: list[str]) -> str:
    """``0.2.0-0.4.0, 0.7.0`` for runs of consecutive known releases."""
    from gym_runtime.gym_release import RELEASES

    order = [r.version for r in RELEASES]
    runs: list[list[str]] = []
    for v in versions:
        if runs and order.index(v) == order.index(runs[-1][-1]) + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return ", ".join(r[0] if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def _daemon(settings: RuntimeSettings) -> dict[str, Any] | None:
    """The running daemon (pid, head server) with its processes by role, or None when none runs."""
    from gym_runtime.supervise.daemon_record import running

    record = running(settings.home)
    if record is None:
        return None
    out: dict[str, Any] = {"pid": record.get("pid"), "head_server": record.get("head_server")}
    if record.get("head_server"):
        import httpx

        try:
            r = httpx.get(str(record["head_server"]).rstrip("/") + "/processes", timeout=5.0, trust_env=False)
            out["processes"] = r.json().get("by_role") if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as e:
            out["processes_error"] = str(e)
    return out


def _task_sandboxes(report: Any, settings: RuntimeSettings) -> dict[str, Any]:
    """What task sandboxes this host gives (docs/runtime.md, "Task sandboxes"): level, images, provider mode."""
    from sandbox.taskbox import box_support

    support = box_support(report)
    ts = settings.task_sandboxes
    out: dict[str, Any] = {
        "level": "unavailable" if isinstance(support, str) else ("full" if support[1] == "mount" else "partial"),
        "provider_mode": ts.provider_mode if ts else "auto",
        "images": [str(d) for d in ts.image_dirs] if ts else [],
        "image_map": dict(ts.image_map) if ts else {},
    }
    if isinstance(support, str):
        out["reason"] = support
    return out


def _sandbox_backends(settings: RuntimeSettings, local_level: str, reasons: list[str]) -> dict[str, Any]:
    """The chosen backend and what each gives; asks the OpenSandbox server when one is configured.
    ``status`` is ``error`` when the chosen backend cannot run servers."""
    import asyncio

    from sandbox.backends import LOCAL_GIVES
    from sandbox.opensandbox.backend import OpenSandboxBackend

    out: dict[str, Any] = {
        "chosen": settings.sandbox_backend,
        "local": {"isolation": local_level, "gives": LOCAL_GIVES[local_level], "reasons": reasons},
    }
    if settings.opensandbox is None:
        out["opensandbox"] = {
            "status": "not configured",
            "hint": "set OPENSANDBOX_DOMAIN (and OPENSANDBOX_API_KEY, "
            "GYM_RUNTIME_OPENSANDBOX_IMAGE, GYM_RUNTIME_OPENSANDBOX_DAEMON_HOST) to use it",
        }
    else:

        async def ask() -> dict[str, Any]:
            backend = OpenSandboxBackend(settings.opensandbox, None)
            try:
                return await backend.check()
            finally:
                await backend.close()

        out["opensandbox"] = asyncio.run(ask())
    chosen = out[settings.sandbox_backend]
    if settings.sandbox_backend == "opensandbox" and chosen.get("status") != "ok":
        out["status"] = "error"
        out["invalid_input"] = (chosen.get("error") or {}).get("code") in (
            "GR-OSB-AUTH",
            "GR-OSB-SETTINGS",
        ) or chosen.get("status") == "not configured"
    return out


def collect(args: argparse.Namespace) -> dict[str, Any]:
    """Every check as a JSON-ready dict."""
    from sandbox import EgressPolicy, probe_isolation

    settings = load_settings()
    report = probe_isolation()
    isolation = {"level": report.level.value, "reasons": list(report.reasons), **report.to_dict()}
    from gym_runtime.config.merge import PolicyValues

    base = PolicyValues.from_environ(settings.environ).base_url
    endpoints = base if isinstance(base, list) else [base] if base else []
    try:
        egress: dict[str, Any] = EgressPolicy.from_environ(settings.environ, policy_endpoints=endpoints).describe()
    except GymRuntimeError as e:
        egress = {"status": "error", "error": e.to_dict(), "invalid_input": e.exit_code == EXIT_INVALID}
    out = {
        "isolation": isolation,
        "sandbox_backends": _sandbox_backends(settings, report.level.value, list(report.reasons)),
        "pythons": [
            {"version": i.version, "path": str(i.path), "source": i.source, "gym_releases": _releases_of(i.version)}
            for i in _pythons(settings)
        ],
        "uv": _uv(settings),
        "venv_dir": _writable(settings.venv_dir),
        "home": _writable(settings.home),
        "ray": _ray(args.ray_address, settings),
        "egress": egress,
        "task_sandboxes": _task_sandboxes(report, settings),
        "server_env": [{"name": n, "instance": i, "set": n in settings.environ} for n, i in settings.server_env],
        "daemon": _daemon(settings),
    }
    if getattr(args, "package", None):
        out["gym_release"], out["secrets"] = _package(args.package, settings)
    return out


def egress_lines(d: dict[str, Any]) -> list[str]:
    """The egress policy (``EgressPolicy.describe()``, or an error) as short human lines."""
    if d.get("status") == "error":
        err = d.get("error", {})
        return [f"ERROR {err.get('message', '?')}", *([f"hint: {err['hint']}"] if err.get("hint") else [])]
    internet = d.get("allow_internet")
    lines = [
        f"{d.get('default', 'deny')} by default; internet {'ALLOWED' if internet else 'off'} "
        "(NMP_RL_SANDBOX_ALLOW_INTERNET); the effective allowlist:"
    ]
    lines += [f"  allow {e['allow']}  ({e['source']})" for e in d.get("allowlist", [])]
    if d.get("operator_list") and not d.get("operator_list_active"):
        lines.append(
            "operator list (NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW): "
            + ", ".join(d["operator_list"])
            + " -- not in effect while internet is off"
        )
    ranges = d.get("denied_ranges", [])
    lines.append(
        f"never: {len(ranges)} private/link-local/metadata ranges ({', '.join(ranges[:3])}, ...) "
        "unless a policy endpoint"
    )
    return lines


def backend_lines(d: dict[str, Any]) -> list[str]:
    """The sandbox backends (:func:`_sandbox_backends`) as short human lines."""
    lines = [
        f"servers run in the {d['chosen']} backend (GYM_RUNTIME_SANDBOX_BACKEND, --sandbox-backend)",
        f"local: isolation {d['local']['isolation']}: {d['local']['gives']}",
    ]
    osb = d["opensandbox"]
    if osb.get("status") == "ok":
        lines.append(
            f"opensandbox: server {osb['server']} version {osb['version']} (API key {osb['api_key']}; "
            f"image {osb['image'] or 'NOT SET'}): {osb['gives']}"
        )
        lines.append(
            f"opensandbox: task sandboxes of configs' opensandbox provider blocks are made there; images "
            f"approved: {osb.get('task_images', 'nothing (unset)')} (GYM_RUNTIME_OPENSANDBOX_TASK_IMAGES)"
        )
    elif osb.get("status") == "error":
        err = osb.get("error", {})
        lines.append(
            f"opensandbox: server {osb.get('server')}: ERROR [{err.get('code', '?')}] {err.get('message', '?')}"
        )
        lines += [f"hint: {err['hint']}"] if err.get("hint") else []
    else:
        lines.append(f"opensandbox: {osb['status']} ({osb['hint']})")
    return lines


def run(args: argparse.Namespace) -> int:
    from gym_runtime.supervise.passthrough import summary as passthrough_summary

    out = collect(args)
    bad = [k for k, v in out.items() if isinstance(v, dict) and v.get("status") == "error"]
    cache = out["uv"].get("cache_dir")
    if cache and cache["status"] == "error":
        bad.append("uv.cache_dir")
    invalid = [k for k, v in out.items() if isinstance(v, dict) and v.get("invalid_input")]
    code = EXIT_INVALID if invalid else EXIT_RUNTIME if bad else 0
    if args.json:
        print(json.dumps({**out, "problems": bad}, indent=2, default=str))
        return code
    iso = out["isolation"]
    print(f"isolation: {iso['level']}" + (f" ({'; '.join(iso['reasons'])})" if iso["reasons"] else ""))
    for i, line in enumerate(backend_lines(out["sandbox_backends"])):
        print(("backends:  " if i == 0 else " " * 11) + line)
    pythons = [
        f"{p['version']} {p['path']} [{p['source']}] "
        + (f"runs nemo-gym {_ranges(p['gym_releases'])}" if p["gym_releases"] else "runs no nemo-gym release")
        for p in out["pythons"]
    ] or ["none"]
    for i, line in enumerate([*pythons, *_no_current_python(out["pythons"])]):
        print(("pythons:   " if i == 0 else " " * 11) + line)
    uv = out["uv"]
    print(f"uv:        {uv['version']} ({uv['binary']}); index {uv['index']}" + (" [offline]" if uv["offline"] else ""))
    for ignored in uv["pip_settings_ignored"]:
        print(f"           {ignored}")
    for key, d in (("venv dir", out["venv_dir"]), ("uv cache", cache), ("home", out["home"])):
        if d:
            print(f"{key + ':':<10} {d['path']} ({'writable' if d['writable'] else 'NOT writable'})")
    ray = out["ray"]
    print(
        "ray:       "
        + (ray.get("summary") or ray.get("error", {}).get("message", "?"))
        + ("" if ray.get("reachable", True) else f" -- {ray['error']['message']}")
    )
    for i, line in enumerate(egress_lines(out["egress"])):
        print(("egress:    " if i == 0 else " " * 11) + line)
    ts = out["task_sandboxes"]
    print(
        f"sandboxes: task sandboxes {ts['level']}"
        + (f" ({ts['reason']})" if ts.get("reason") else "")
        + f"; provider {ts['provider_mode']} (GYM_RUNTIME_SANDBOX_PROVIDER); images in "
        + (", ".join(ts["images"]) or "-")
        + (f"; image map {', '.join(f'{k}={v}' for k, v in ts['image_map'].items())}" if ts["image_map"] else "")
    )
    if out["server_env"]:
        print(
            "server env: "
            + ", ".join(
                f"{e['instance'] + ':' if e['instance'] else ''}{e['name']}" + ("" if e["set"] else " (not set)")
                for e in out["server_env"]
            )
            + " (GYM_RUNTIME_SERVER_ENV; names only)"
        )
    if "gym_release" in out:
        rel = out["gym_release"]
        print(
            "gym:       "
            + (f"{rel['summary']}: {rel['why']}" if rel["status"] == "ok" else f"ERROR {rel['error']['message']}")
        )
    if "secrets" in out:
        sec = out["secrets"]
        lines = (
            [f"{n}: {', '.join(keys) or 'no secrets'}" for n, keys in sec["servers"].items()]
            if sec["status"] == "ok"
            else [f"ERROR {sec['error']['message']}"]
        )
        for i, line in enumerate(lines):
            print(("secrets:   " if i == 0 else " " * 11) + line)
        passed = {n: rows for n, rows in sec.get("passed_env", {}).items() if rows}
        for i, (n, rows) in enumerate(passed.items()):
            print(("passed:    " if i == 0 else " " * 11) + f"{n}: {passthrough_summary(rows)}")
    d = out["daemon"]
    if d is None:
        print("daemon:    none running on this GYM_RUNTIME_HOME")
    else:
        roles = ", ".join(
            f"{role} {t['processes']} ({t['rss_mb']:.0f} MiB)" for role, t in (d.get("processes") or {}).items()
        )
        print(
            f"daemon:    pid {d['pid']}, head server {d.get('head_server') or '(starting)'}"
            + (f"; processes: {roles}" if roles else "")
        )
    if bad:
        print("problems:  " + ", ".join(bad) + (f" (bad setting values: {', '.join(invalid)})" if invalid else ""))
    return code
