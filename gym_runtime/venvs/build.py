"""Build the planned venvs: reuse by digest, lock, build in a temp dir, mark, rename (docs/architecture.md §5).

Per venv: if ``<venv>/.gym-runtime-ready`` holds the digest, it is reused without any uv call.
A venv built for servers that had another venv before says why (:mod:`gym_runtime.venvs.reasons`).
Otherwise, under the per-venv file lock (another builder may have finished meanwhile), leftover
temp builds are removed, the steps of :mod:`gym_runtime.venvs.stages` run in a fresh temp dir
while holding a shared lock on the uv cache, the marker is written last, and the directory is
renamed into place. Any failure or cancel removes the temp dir, so nothing half-built ever looks
ready (case C01). A cache read error (case C18) is retried once with ``--refresh-package``; a
distribution installed from a damaged copy in the uv cache (files of its RECORD missing or cut,
:mod:`gym_runtime.venvs.integrity`) is installed again without the cache, with a warning naming the
cache entry to clean (``GR-BUILD-CACHE`` if that does not mend it). A full disk is one
``GR-BUILD-NO-SPACE`` error naming the disk (:mod:`gym_runtime.venvs.diskspace`).

Builds run in a bounded thread pool (default: CPU count), each uv call in its own process group;
setting ``cancel`` (or Ctrl-C in the calling thread) kills them within about two seconds.

The module is long because reuse, lock, temp dir, marker and rename are one transaction, and each
undo path stays beside the step it undoes.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gym_runtime.errors import BuildCancelledError, BuildError, Violation
from gym_runtime.ray.switch import install_ray_switch
from gym_runtime.settings import RuntimeSettings
from gym_runtime.task_sandboxes.install import install_provider
from gym_runtime.venvs import closure, integrity, resolutions, stages
from gym_runtime.venvs.diagnose import STAGES, diagnose, uv_error_block
from gym_runtime.venvs.diskspace import is_enospc, is_no_space, no_space_error
from gym_runtime.venvs.exit_hook import install_exit_hook
from gym_runtime.venvs.index_options import first_index_hint
from gym_runtime.venvs.maintenance import network_fs_warning
from gym_runtime.venvs.pip_settings import pip_hint
from gym_runtime.venvs.plan import InstallPlan, VenvPlan
from gym_runtime.venvs.progress import Reporter, make_reporter
from gym_runtime.venvs.reasons import previous, rebuild_reasons, remember
from gym_runtime.venvs.stages import StageContext, StepFailure
from gym_runtime.venvs.store import (
    cache_lock,
    install,
    is_ready,
    remove_abandoned,
    remove_stale,
    tmp_dir,
    venv_lock,
    write_marker,
)
from gym_runtime.venvs.uvrun import Cancelled, UvResult

# stage-1 failures about what the index offers: their hint names pip index settings uv ignores
INDEX_FAILURES = ("GR-BUILD-MISSING", "GR-BUILD-PIN-MISSING", "GR-BUILD-WHEEL-TAGS", "GR-BUILD-YANKED", "GR-BUILD-UV")
_CACHE_ERR = re.compile(
    r"(failed to (read|open) (file|directory)|No such file or directory).*"
    r"(archive-v\d|wheels-v\d|sdists-v\d|\.dist-info)",
    re.I,
)


@dataclass(frozen=True)
class Venv:
    """A ready venv: ``path``, its interpreter ``python`` (``<venv>/bin/python``), ``digest``,
    whether it was ``reused``, the servers using it, warnings from the build, seconds spent."""

    path: Path
    python: Path
    digest: str
    reused: bool
    instances: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    seconds: float = 0.0
    reasons: tuple[str, ...] = ()

    @property
    def status(self) -> str:
        """``reused``, ``built`` (first build of its servers) or ``rebuilt (<what changed>)``."""
        if self.reused:
            return "reused"
        return f"rebuilt ({'; '.join(self.reasons)})" if self.reasons else "built"

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "python": str(self.python),
            "digest": self.digest,
            "reused": self.reused,
            "servers": list(self.instances),
            "warnings": list(self.warnings),
            "seconds": round(self.seconds, 3),
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True)
class VenvSet:
    """The venvs of a plan, looked up by server instance name."""

    venvs: tuple[Venv, ...]
    by_instance: dict[str, str] = field(default_factory=dict)

    def for_instance(self, name: str) -> Venv:
        """The venv of server instance ``name``; raises ``KeyError`` for an unknown name."""
        digest = self.by_instance[name]
        return next(v for v in self.venvs if v.digest == digest)

    @property
    def built(self) -> int:
        return sum(not v.reused for v in self.venvs)

    def to_dict(self) -> dict[str, Any]:
        return {"venvs": [v.to_dict() for v in self.venvs], "built": self.built, "reused": len(self.venvs) - self.built}


def _cache_retry_names(output: str) -> tuple[str, ...]:
    names = re.findall(r"/([A-Za-z0-9_.]+?)-\d[^/\s]*\.dist-info", output)
    return tuple(dict.fromkeys(n.replace("_", "-").lower() for n in names))


def _run_step(step: Any, vp: VenvPlan, tmp: Path, ctx: StageContext) -> Any:
    """Run an install step; on a uv cache read error, retry once with ``--refresh-package`` (C18)."""
    try:
        return step(vp, tmp, ctx)
    except StepFailure as e:
        if not _CACHE_ERR.search(e.result.output) or step is stages.stage2:  # uv: no --refresh offline
            raise
        names = _cache_retry_names(e.result.output) or tuple(sorted(vp.source.names)) or ("pip",)
        with open(e.result.log, "a") as fh:
            fh.write(f"[gym-runtime] uv cache read error; retrying once with --refresh-package {' '.join(names)}\n")
        return step(vp, tmp, ctx, refresh=names)


def _replay(vp: VenvPlan, tmp: Path, ctx: StageContext, settings: RuntimeSettings, announce: Any) -> UvResult | None:
    """Stage 1 offline from the resolution recorded for ``vp`` (:mod:`gym_runtime.venvs.resolutions`);
    None when there is none to replay (no record, hash mode, packages to refresh) or uv could not
    do it offline: the venv is then made afresh for the usual stage 1, and the log says why."""
    if vp.hash_mode or vp.refresh:
        return None
    pinned = resolutions.recorded(settings.resolutions_dir, vp.digest)
    if pinned is None:
        return None
    announce()
    source = resolutions.record_path(settings.resolutions_dir, vp.digest)
    try:
        return stages.stage1(vp, tmp, ctx, replay=(source, pinned))
    except StepFailure as e:
        why = uv_error_block(e.result.output) or f"exit status {e.result.returncode}"
        shutil.rmtree(tmp, ignore_errors=True)
        stages.create_venv(vp, tmp, ctx)
        with open(e.result.log, "a") as fh:
            fh.write(
                f"[gym-runtime] the recorded resolution ({source}) could not be installed offline:\n{why}\n"
                "[gym-runtime] resolving against the index instead\n"
            )
        return None


def _record(settings: RuntimeSettings, vp: VenvPlan, installed: dict[str, str]) -> None:
    """Record what stage 1 installed for ``vp``; a record that cannot be written costs only the
    next rebuild's offline replay."""
    try:
        resolutions.record(settings.resolutions_dir, vp.digest, vp.python.version, installed)
    except OSError:
        pass


def _mend(step: Any, vp: VenvPlan, tmp: Path, ctx: StageContext) -> list[str]:
    """After an install step: reinstall, without the uv cache, every distribution whose files do not
    match its RECORD; the warning for the build report, or raises ``GR-BUILD-CACHE``."""
    found = integrity.damaged(tmp)
    if not found:
        return []
    names = tuple(sorted(found))
    cache = ctx.uv_env.env.get("UV_CACHE_DIR") or "uv's default cache (`uv cache dir` prints it)"
    log = ctx.log(vp, "stage2" if step is stages.stage2 else "stage1")
    with open(log, "a") as fh:
        fh.write(
            f"[gym-runtime] installed from a damaged uv cache entry:\n{integrity.describe(found)}\n"
            f"[gym-runtime] installing {' '.join(names)} again without the cache\n"
        )
    step(vp, tmp, ctx, uncached=names)
    still = integrity.damaged(tmp)
    fix = f"uv cache clean {' '.join(names)}"
    if still:
        label = ", ".join(vp.instances)
        raise BuildError(
            f"venv build failed for {label} ({vp.rel_file}): {', '.join(sorted(still))} installed "
            f"with files missing, also without the uv cache ({cache})",
            code="GR-BUILD-CACHE",
            cause=integrity.describe(still),
            log=log,
            hint=f"remove the damaged entries with `{fix}` (with UV_CACHE_DIR={cache} if set) and build "
            "again; if it persists, the distribution's own wheel is broken",
            extra={"server": vp.instances[0], "servers": list(vp.instances), "file": vp.rel_file},
        )
    return [
        f"the uv cache's copy of {', '.join(names)} was damaged ({integrity.describe(found)}); installed again "
        f"without the cache. Remove the damaged entries: `{fix}` (uv cache: {cache})"
    ]


def build_one(
    vp: VenvPlan, settings: RuntimeSettings, ctx: StageContext, reporter: Reporter, honoured: dict[str, str]
) -> Venv:
    """Make ``vp`` ready (or find it ready); raises :class:`BuildError` or :class:`Cancelled`."""
    t0 = time.monotonic()
    label = ", ".join(vp.instances)
    root = settings.venv_dir
    if is_ready(vp.path, vp.digest):
        return Venv(vp.path, vp.path / "bin" / "python", vp.digest, True, vp.instances)
    with venv_lock(root, vp.digest, ctx.cancel, on_wait=lambda: reporter.stage(vp.digest, label, "waiting for lock")):
        if is_ready(vp.path, vp.digest):
            return Venv(vp.path, vp.path / "bin" / "python", vp.digest, True, vp.instances)
        remove_stale(root, vp.digest)
        for stage in ("venv", "closure", "stage1", "stage2", "verify"):
            ctx.log(vp, stage).unlink(missing_ok=True)
        tmp = tmp_dir(root, vp.digest)
        warnings: list[str] = []
        try:
            with cache_lock(settings.uv_cache_dir):
                reporter.stage(vp.digest, label, "venv")
                stages.create_venv(vp, tmp, ctx)
                if vp.stage2 and not closure.nothing_to_prove(
                    vp.source, [(p.requirement, p.as_constraint) for p in vp.pins]
                ):
                    reporter.stage(vp.digest, label, "stage 2: closure check (offline)")
                    stages.closure_check(vp, tmp, ctx)
                before: dict[str, str] = {}
                if stages.has_stage1(vp):
                    res = _replay(
                        vp,
                        tmp,
                        ctx,
                        settings,
                        lambda: reporter.stage(vp.digest, label, "stage 1 (the recorded resolution, offline)"),
                    )
                    if res is None:
                        reporter.stage(vp.digest, label, "stage 1")
                        res = _run_step(stages.stage1, vp, tmp, ctx)
                    warnings += stages.uv_warnings(res.output) + _mend(stages.stage1, vp, tmp, ctx)
                    before = stages.installed(vp, tmp, ctx, "verify")
                    warnings += stages.pool_bypassed(vp, before)
                if vp.stage2:
                    reporter.stage(vp.digest, label, "stage 2 (offline)")
                    res = _run_step(stages.stage2, vp, tmp, ctx)
                    warnings += stages.uv_warnings(res.output) + _mend(stages.stage2, vp, tmp, ctx)
            reporter.stage(vp.digest, label, "verify")
            have = stages.installed(vp, tmp, ctx, "verify") if vp.stage2 or not before else before  # one listing
            warnings += stages.overridden(before, have) if vp.stage2 else []
            missing = stages.missing_after_install(vp, have)
            if missing:
                raise BuildError(
                    f"venv build failed for {label} at verify ({vp.rel_file}): "
                    f"{', '.join(missing)} not installed inside the venv",
                    code="GR-BUILD-VERIFY",
                    cause=f"installed under {tmp}: {', '.join(sorted(have)) or '(nothing)'}",
                    hint="an inherited setting redirected the install; see the scrubbed variables "
                    "at the top of the venv log",
                    log=ctx.log(vp, "venv"),
                    extra={
                        "server": vp.instances[0],
                        "servers": list(vp.instances),
                        "stage": "verify",
                        "file": vp.rel_file,
                    },
                )
            if before:
                _record(settings, vp, before)
            install_exit_hook(tmp)
            install_ray_switch(tmp)  # a Gym server run without Ray (ray/switch.py), where the venv holds Gym
            install_provider(tmp)  # NeMo Gym's `gym_runtime` sandbox provider (task_sandboxes/install.py)
            write_marker(
                tmp,
                {
                    "digest": vp.digest,
                    "servers": list(vp.instances),
                    "python": vp.python.version,
                    "python_path": str(vp.python.path),
                    "uv": ctx.uv_env.describe().splitlines()[0],
                    "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "installed": have,
                    "warnings": warnings,
                    "plan": vp.to_dict(),
                },
            )
            install(tmp, vp.path)
        except StepFailure as e:
            shutil.rmtree(tmp, ignore_errors=True)
            if is_no_space(e.result.output):
                raise _no_space(
                    vp, settings, STAGES.get(e.stage, e.stage), uv_error_block(e.result.output), e.result.log
                ) from None
            err = diagnose(vp, e, honoured, ctx.package_root)
            if e.stage == "stage1" and (rule := first_index_hint(vp.source, vp.rel_file, err.cause or "")):
                err.hint = rule  # uv's first-index rule at work: pip's settings have nothing to do with it
            elif e.stage == "stage1" and err.code in INDEX_FAILURES and (note := pip_hint(settings.environ)):
                err.hint = f"{err.hint}; {note}" if err.hint else note  # an index given to pip, not to uv
            if warnings:  # e.g. stage 1 bypassed wheels/ before stage 2 failed (case C12)
                err.cause = (err.cause or "") + "\nearlier in this build:\n" + "\n".join(f"  {w}" for w in warnings)
                err.extra["warnings"] = warnings
            raise err from None
        except BaseException as e:
            shutil.rmtree(tmp, ignore_errors=True)
            if is_enospc(e):
                raise _no_space(vp, settings, "the build", f"{e}", None) from None
            raise
    return Venv(
        vp.path, vp.path / "bin" / "python", vp.digest, False, vp.instances, tuple(warnings), time.monotonic() - t0
    )


def _with_reasons(v: Venv, vp: VenvPlan, settings: RuntimeSettings, package_root: Path | None) -> Venv:
    """``v`` with what changed since its servers' last build (a rebuild), and this build recorded."""
    reasons: list[str] = []
    for name in vp.instances:
        before = previous(settings.venv_dir, package_root, name)
        if not v.reused and before is not None:
            why = rebuild_reasons(before["inputs"], vp.inputs, vp.rel_file) or [
                "same inputs; the previous venv was removed" if before.get("digest") == vp.digest else "inputs changed"
            ]
            reasons += [r for r in why if r not in reasons]
        remember(settings.venv_dir, package_root, name, vp.digest, vp.inputs)
    return replace(v, reasons=tuple(reasons))


def _no_space(vp: VenvPlan, settings: RuntimeSettings, stage: str, text: str, log: Path | None) -> BuildError:
    roots = {"venv root": settings.venv_dir, "uv cache": settings.uv_cache_dir, "logs": settings.logs_dir}
    return no_space_error(list(vp.instances), stage, vp.rel_file, text, roots, log)


def _combine(errors: list[BuildError]) -> BuildError:
    """One error for several failed builds: a violation per failure, each with its fix and its own
    log (on a line under the hint); the full blocks (uv's causes) are in ``extra["failures"]``."""
    if len(errors) == 1:
        return errors[0]
    violations = [
        Violation(
            e.code,
            e.message,
            file=e.extra.get("file"),
            hint="\n    ".join([*([e.hint] if e.hint else []), *([f"log: {e.log}"] if e.log else [])]) or None,
        )
        for e in errors
    ]
    return BuildError(
        f"{len(errors)} venv builds failed",
        code="GR-BUILD-MANY",
        violations=violations,
        hint="fix each failure; its log (uv's full output) is listed under it",
        extra={"failures": [e.to_dict() for e in errors]},
    )


def build_venvs(
    plan: InstallPlan,
    settings: RuntimeSettings,
    *,
    progress: bool | Reporter = False,
    cancel: threading.Event | None = None,
    max_workers: int | None = None,
    fail_fast: bool = False,
) -> VenvSet:
    """Build (or reuse) every venv of ``plan``; return them by server instance.

    ``max_workers`` bounds parallel builds (default: CPU count). ``fail_fast`` cancels the other
    builds after the first failure. Raises :class:`BuildError` (one block per failure, several
    combined as ``GR-BUILD-MANY``), or ``GR-BUILD-CANCELLED`` when ``cancel`` was set; a
    ``KeyboardInterrupt`` in the calling thread cancels the builds and is re-raised.
    """
    cancel = cancel or threading.Event()
    reporter = make_reporter(progress)
    fs_warning = network_fs_warning(settings.uv_cache_dir)
    ctx = StageContext(
        plan.uv_env,
        settings.logs_dir / "build",
        cancel,
        settings.venv_dir / ".tmp",
        notes=f"WARNING: {fs_warning}\n" if fs_warning else "",
        package_root=plan.package_root,
    )
    ctx.cwd.mkdir(parents=True, exist_ok=True)
    remove_abandoned(settings.venv_dir)  # builds of a daemon that was SIGKILLed
    results: dict[str, Venv] = {}
    errors: list[BuildError] = []
    todo = list(plan.venvs)
    workers = max(1, min(max_workers or os.cpu_count() or 1, len(todo) or 1))
    started: dict[str, float] = {}  # digest -> when a worker began it (a failure reports its real duration)

    def one(vp: VenvPlan) -> Venv:
        started[vp.digest] = time.monotonic()
        return build_one(vp, settings, ctx, reporter, plan.uv_env.index_settings())

    def took(vp: VenvPlan) -> float:
        return time.monotonic() - started.get(vp.digest, time.monotonic())

    reporter.start()
    try:
        with cf.ThreadPoolExecutor(workers, thread_name_prefix="venv-build") as pool:
            futs = {pool.submit(one, vp): vp for vp in todo}
            pending = set(futs)
            try:
                while pending:
                    done, pending = cf.wait(pending, timeout=0.2, return_when=cf.FIRST_COMPLETED)
                    for f in done:
                        vp = futs[f]
                        label = ", ".join(vp.instances)
                        try:
                            v = _with_reasons(f.result(), vp, settings, plan.package_root)
                            results[vp.digest] = v
                            reporter.done(vp.digest, label, v.status, v.seconds)
                        except BuildError as e:
                            e.extra.setdefault("seconds", round(took(vp), 3))
                            errors.append(e)
                            reporter.done(vp.digest, label, f"FAILED [{e.code}]", e.extra["seconds"])
                            if fail_fast:
                                cancel.set()
                        except Cancelled:
                            reporter.done(vp.digest, label, "cancelled", took(vp))
            except KeyboardInterrupt:
                cancel.set()
                cf.wait(pending)
                raise
    finally:
        reporter.stop()
    if errors:
        order = {vp.instances[0]: i for i, vp in enumerate(todo)}  # plan order, not completion order
        raise _combine(sorted(errors, key=lambda e: order.get(e.extra.get("server", ""), len(order))))
    if len(results) < len(todo):
        raise BuildCancelledError(
            "venv builds were cancelled; nothing half-built was kept",
            hint="run the build again; finished venvs are reused",
        )
    by_instance = dict(plan.by_instance)
    return VenvSet(tuple(results[vp.digest] for vp in todo), by_instance)
