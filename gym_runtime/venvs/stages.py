"""The steps of one venv build, each one uv call with its own log (docs/architecture.md §5).

1. ``venv``: ``uv venv --relocatable`` from the planned interpreter (never downloaded);
   then, for a venv with stage 2, ``closure``: ``wheels/`` alone must satisfy the install file and
   pins (uv's resolver, offline), before the index is consulted at all.
2. ``stage1``: ``uv pip install`` of the rendered install file plus the injected pins (their own
   file, ``-r`` or ``-c``) under the server's ``overrides.txt`` (``--overrides``), ``wheels/``
   offered as ``--find-links``, the index enabled with uv's honoured settings; ``--require-hashes`` in hash mode (case C16). A plan built before runs it
   first ``--offline`` with the recorded resolution as constraints
   (:mod:`gym_runtime.venvs.resolutions`).
3. ``stage2`` (agents and resources servers of wheels packages): the vendored closure as exact
   ``name==version`` pins with ``--no-index --offline --no-config --find-links wheels/``, under the
   same overrides (the closure proof uses them too, so the three steps resolve alike).
4. ``verify``: the venv's own interpreter lists what is installed under its prefix and every
   requested distribution must be there (case C08).

No step compiles bytecode: a closure holds far more files than its servers import, and
:mod:`gym_runtime.venvs.bytecode` compiles what they do import into the venv's shared cache. The
inputs uv reads are kept in ``<venv>/.gym-runtime/`` for operators.
"""

from __future__ import annotations

import json
import platform
import threading
from dataclasses import dataclass
from pathlib import Path

from gym_runtime.venvs import closure, resolutions
from gym_runtime.venvs.plan import VenvPlan
from gym_runtime.venvs.tags import rejection
from gym_runtime.venvs.uvrun import UvEnv, UvResult, run_command, run_uv

INPUTS_DIR = ".gym-runtime"
_LIST = r"""
import json, os, re, sys
import importlib.metadata as md
prefix = os.path.realpath(sys.prefix)
out = {}
for d in md.distributions():
    loc = os.path.realpath(str(d.locate_file("")))
    if loc == prefix or loc.startswith(prefix + os.sep):
        out[re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower()] = d.version
print(json.dumps({"prefix": sys.prefix, "executable": sys.executable, "installed": out}))
"""


@dataclass
class StageContext:
    """What every step needs: the uv environment, the log directory, the cancel event."""

    uv_env: UvEnv
    log_dir: Path
    cancel: threading.Event | None
    cwd: Path
    notes: str = ""
    package_root: Path | None = None  # named in fixes (`gym-runtime vendor PKG ...`)

    def log(self, vp: VenvPlan, stage: str) -> Path:
        return self.log_dir / f"{vp.name}-{vp.digest[:12]}.{stage}.log"


class StepFailure(Exception):
    """A step failed: which stage, and uv's result (output and log)."""

    def __init__(self, stage: str, result: UvResult) -> None:
        super().__init__(f"{stage} failed with exit status {result.returncode}")
        self.stage = stage
        self.result = result


def _check(stage: str, result: UvResult) -> UvResult:
    if result.returncode != 0:
        raise StepFailure(stage, result)
    return result


def write_overrides(vp: VenvPlan, venv: Path) -> list[str]:
    """Write the server's ``overrides.txt`` into ``<venv>/.gym-runtime/``; the uv arguments that pass
    it (``[]``: the server has none)."""
    if vp.overrides is None:
        return []
    d = venv / INPUTS_DIR
    d.mkdir(parents=True, exist_ok=True)
    path = d / "overrides.txt"
    path.write_text(vp.overrides.render())
    return ["--overrides", str(path)]


def write_inputs(vp: VenvPlan, venv: Path) -> tuple[Path, Path | None]:
    """Write the rendered install file and the pins file into ``<venv>/.gym-runtime/``."""
    d = venv / INPUTS_DIR
    d.mkdir(parents=True, exist_ok=True)
    req = d / "requirements.txt"
    req.write_text(vp.source.render(vp.sdk_replacement))
    if not vp.pins:
        return req, None
    constraint = vp.pins[0].as_constraint
    pins = d / ("gym-runtime-constraints.txt" if constraint else "gym-runtime-pins.txt")
    lines = ["# injected by gym-runtime (pin mode " + vp.pin_mode + "); not part of the server's requirements"]
    for p in vp.pins:
        hashes = (
            [f" --hash=sha256:{f.sha256}" for f in vp.pool_of(p.name) if f.version == p.version] if vp.hash_mode else []
        )
        lines.append(f"{p.constraint if constraint else p.requirement}{''.join(hashes)}    # {p.origin}")
    pins.write_text("\n".join(lines) + "\n")
    return req, pins


def create_venv(vp: VenvPlan, venv: Path, ctx: StageContext) -> UvResult:
    header = (
        ctx.notes + ctx.uv_env.describe() + f"\nservers: {', '.join(vp.instances)}\ndigest: {vp.digest}\n"
        f"python: {vp.python.describe()} (requested by {vp.python_origin})\n"
    )
    args = ["venv", "--relocatable", "--no-config", "--no-python-downloads", "--python", str(vp.python.path), str(venv)]
    return _check(
        "venv", run_uv(args, env=ctx.uv_env.env, log=ctx.log(vp, "venv"), cwd=ctx.cwd, cancel=ctx.cancel, header=header)
    )


def closure_check(vp: VenvPlan, venv: Path, ctx: StageContext) -> UvResult:
    """Before any install (wheels formats): prove that ``wheels/`` alone satisfies the install file
    and the injected pins for the venv's interpreter (:mod:`gym_runtime.venvs.closure`)."""
    assert vp.wheels_dir is not None  # a wheels format's plan has one
    pins = [(p.requirement, p.as_constraint) for p in vp.pins]
    files = closure.write_inputs(venv / INPUTS_DIR, closure.proof_text(vp.source, vp.sdk_replacement), pins)
    files += write_overrides(vp, venv)
    target = closure.ClosureTarget(
        ".".join(vp.python.version.split(".")[:2]),
        closure.platform_of(platform.machine()),
        interpreter=venv / "bin" / "python",
    )
    return _check(
        "closure",
        closure.prove(
            files, vp.wheels_dir, target, env=ctx.uv_env.env, log=ctx.log(vp, "closure"), cwd=ctx.cwd, cancel=ctx.cancel
        ),
    )


def has_stage1(vp: VenvPlan) -> bool:
    installs = [ln for ln in vp.source.lines if ln.kind != "option"]
    return bool(installs) or any(not p.as_constraint for p in vp.pins)


def stage1(
    vp: VenvPlan,
    venv: Path,
    ctx: StageContext,
    refresh: tuple[str, ...] = (),
    uncached: tuple[str, ...] = (),
    replay: tuple[Path, dict[str, str]] | None = None,
) -> UvResult:
    """``uv pip install`` of the install file and pins; ``refresh``: ``--refresh-package`` names;
    ``uncached``: distributions to install again without the uv cache (``--reinstall-package``,
    ``--no-cache``: their cached copy was damaged, :mod:`gym_runtime.venvs.integrity`);
    ``replay``: ``(record path, {name: version})``, a recorded resolution installed ``--offline``
    with those versions as constraints (:mod:`gym_runtime.venvs.resolutions`)."""
    req, pins = write_inputs(vp, venv)
    args = ["pip", "install", "--python", str(venv / "bin" / "python"), "--no-python-downloads", "-r", str(req)]
    if pins is not None:
        args += ["-c" if vp.pins[0].as_constraint else "-r", str(pins)]
    args += write_overrides(vp, venv)
    recorded = None
    if replay is not None:
        recorded = venv / INPUTS_DIR / "gym-runtime-recorded.txt"
        recorded.write_text(resolutions.constraints_text(replay[1], replay[0]))
        args += ["--offline", "-c", str(recorded)]
    if vp.wheels_dir is not None:
        args += ["--find-links", str(vp.wheels_dir)]
    if vp.hash_mode:
        args.append("--require-hashes")
    for name in dict.fromkeys(vp.refresh + refresh):
        args += ["--refresh-package", name]
    args += _uncached(uncached)
    ov = venv / INPUTS_DIR / "overrides.txt" if vp.overrides is not None else None
    shown = "".join(f"--- {p.name}\n{p.read_text()}" for p in (req, pins, ov, recorded) if p is not None)
    return _check(
        "stage1",
        run_uv(args, env=ctx.uv_env.env, log=ctx.log(vp, "stage1"), cwd=ctx.cwd, cancel=ctx.cancel, header=shown),
    )


def stage2(
    vp: VenvPlan,
    venv: Path,
    ctx: StageContext,
    refresh: tuple[str, ...] = (),  # noqa: ARG001 - _run_step calls both stages alike; offline there is no --refresh
    uncached: tuple[str, ...] = (),
) -> UvResult:
    """The vendored closure offline; ``uncached`` as for :func:`stage1`."""
    env = {k: v for k, v in ctx.uv_env.env.items() if k != "UV_FIND_LINKS"}
    args = [
        "pip",
        "install",
        "--python",
        str(venv / "bin" / "python"),
        "--no-python-downloads",
        "--no-index",
        "--offline",
        "--no-config",
        "--find-links",
        str(vp.wheels_dir),
        *write_overrides(vp, venv),
        *_uncached(uncached),
        *vp.closure,
    ]
    # uv refuses --refresh with --offline; stage 1 (run first) already refreshed rebuilt wheels
    return _check(
        "stage2",
        run_uv(
            args,
            env=env,
            log=ctx.log(vp, "stage2"),
            cwd=ctx.cwd,
            cancel=ctx.cancel,
            header="offline: only wheels/ is consulted; nothing may reach the network\n",
        ),
    )


def _uncached(names: tuple[str, ...]) -> list[str]:
    if not names:
        return []
    return ["--no-cache", *(a for n in names for a in ("--reinstall-package", n))]


def installed(vp: VenvPlan, venv: Path, ctx: StageContext, stage: str) -> dict[str, str]:
    """``{name: version}`` of every distribution installed under the venv's prefix."""
    res = _check(
        stage,
        run_command(
            [str(venv / "bin" / "python"), "-I", "-c", _LIST],
            env={"PATH": "/usr/bin:/bin"},
            log=ctx.log(vp, "verify"),
            cwd=ctx.cwd,
            cancel=ctx.cancel,
        ),
    )
    line = [ln for ln in res.output.splitlines() if ln.startswith("{")][-1]
    return dict(json.loads(line)["installed"])


def missing_after_install(vp: VenvPlan, have: dict[str, str]) -> list[str]:
    """Requested distributions that are not installed inside the venv (case C08); one that an
    override drops on this interpreter (a marker that does not hold) is not requested."""
    wanted = {ln.name for ln in vp.source.lines if ln.name and not ln.gym_sdk}
    wanted |= {p.name for p in vp.pins if not p.as_constraint}
    wanted |= {c.split("==")[0] for c in vp.closure}
    dropped = vp.overrides.removed(vp.python.version) if vp.overrides is not None else set()
    return sorted(n for n in wanted if n not in have and n not in dropped)


def pool_bypassed(vp: VenvPlan, have: dict[str, str]) -> list[str]:
    """Warnings for distributions stage 1 took elsewhere although wheels/ has them (cases C12, C15)."""
    out = []
    for name, version in sorted(have.items()):
        files = vp.pool_of(name)
        if not files or any(f.version == version for f in files):
            continue
        versions = ", ".join(sorted({f.version for f in files}))
        why = [f"{f.path.name}: {r}" for f in files if (r := rejection(f.path.name, vp.python))]
        out.append(
            f"wheels/ has {name} {versions} but stage 1 installed {name} {version} from the index"
            + (" (" + "; ".join(why) + ")" if why else "")
        )
    return out


def overridden(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Warnings for stage-1 choices the stage-2 closure replaced (cases C12, C15)."""
    return [
        f"stage 2 replaced {n} {before[n]} (chosen in stage 1) by {after[n]} from wheels/"
        for n in sorted(before)
        if n in after and after[n] != before[n]
    ]


def uv_warnings(output: str) -> list[str]:
    """uv's ``warning:`` lines (e.g. a yanked release, case C15), kept for the build report."""
    return [ln.strip() for ln in output.splitlines() if ln.strip().startswith("warning:")]
