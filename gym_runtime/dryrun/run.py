"""A dry-run: check rows, bring the environment up, sample every row k times, shut down, report.

Order: the package, its configuration and EVERY dataset row are checked before anything
starts (a bad row costs no venv build); then :class:`gym_runtime.Runtime` brings the environment
up (the built-in stub model unless a policy URL is given; when a row offers tools, the start-up
probe of the policy endpoint offers one too, :mod:`gym_runtime.policy.probe`), each row
goes k times to its agent's ``/run``, or through the environment server fronting it under a Gym
release line that has them (:func:`gym_runtime.rollouts.sampler.sample_rows`, each bounded by
``rollout_timeout_s``; :mod:`gym_runtime.rollouts.routing`), every result is appended to the
``--out`` file as it finishes, and the environment is stopped whatever happened. Where the
servers run is the Runtime's placement (``placement="ray"`` in ``runtime_kwargs``: replicas on
the nodes of a Ray cluster, docs/scale-out.md); the rollouts in flight are bounded by
``max_concurrent_rollouts`` (default: sized to the agent replicas, :mod:`gym_runtime.rollouts.spread`)
and the result counts the rollouts each agent replica served.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from gym_runtime.config import PolicyValues, build_config
from gym_runtime.errors import ConfigError, UsageError
from gym_runtime.package import load_package
from gym_runtime.rollouts import ROLLOUT_TIMEOUT_S
from gym_runtime.rollouts.routing import Routing
from gym_runtime.rollouts.rows import DatasetRow, load_rows
from gym_runtime.rollouts.sampler import sample_rows
from gym_runtime.rollouts.spread import replica_counts
from gym_runtime.rollouts.stats import RolloutResult, RowStats, Summary, row_stats, summarize
from gym_runtime.rollouts.verdict import AgentFacts, agent_facts

# Policy values used only to check the configuration before start (the stub or the job fills them).
PLACEHOLDERS = {
    "policy_base_url": "http://127.0.0.1:8000/v1",
    "policy_api_key": "placeholder",
    "policy_model_name": "placeholder",
}


@dataclass(frozen=True)
class DryRunRequest:
    """What to run: ``samples`` per row, the first ``limit`` rows (None: all), at most
    ``max_concurrent_rollouts`` rollouts at once (None: 32 per agent replica,
    :func:`gym_runtime.rollouts.spread.default_max_rollouts`), ``rollout_timeout_s`` per rollout
    (default :data:`ROLLOUT_TIMEOUT_S`; None: unbounded; a rollout past it is the row error
    ``GR-ROLLOUT-DEADLINE``), ``out`` a JSONL file for every result; ``runtime_kwargs`` go to
    :class:`gym_runtime.Runtime` (policy, head, isolation, python, work_dir, placement,
    ray_address...)."""

    package: str | Path
    dataset: str | Path
    overrides: list[str] = field(default_factory=list)
    policy: PolicyValues = field(default_factory=PolicyValues)
    samples: int = 4
    limit: int | None = None
    max_concurrent_rollouts: int | None = None
    rollout_timeout_s: float | None = ROLLOUT_TIMEOUT_S
    out: Path | None = None
    stub_seed: int = 0
    runtime_kwargs: dict[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        """Raises :class:`UsageError` for a non-positive ``samples``/``limit``/``max_concurrent_rollouts``."""
        if self.samples < 1:
            raise UsageError(f"--samples must be at least 1, got {self.samples}")
        for name in ("limit", "max_concurrent_rollouts"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {value}")


@dataclass(frozen=True)
class DryRunResult:
    """The outcome: every rollout, per-row statistics, the summary, the ready info of the
    environment (``startup_s``, ``isolation``, ``placement``, ``policy_model``...), the per-replica
    counts (:func:`gym_runtime.rollouts.spread.replica_counts`) and the bound the rollouts ran with."""

    package: str
    rows: list[DatasetRow]
    results: list[RolloutResult]
    stats: list[RowStats]
    summary: Summary
    ready: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    replicas: list[dict[str, Any]] = field(default_factory=list)
    max_concurrent_rollouts: int | None = None

    @property
    def ok(self) -> bool:
        """No rollout failed, and no row had every sample masked by its environment (case C39)."""
        return self.summary.failures == 0 and self.summary.masked_rows == 0


def prepare(req: DryRunRequest, notes: list[str] | None = None) -> tuple[str, list[DatasetRow], dict[str, AgentFacts]]:
    """Check the package, its configuration and every row; nothing is started.

    Returns the package name, the rows to run (the first ``limit``) and what the report knows of
    each agent (:class:`~gym_runtime.rollouts.verdict.AgentFacts`); sentences about inputs
    accepted with a remark (a dataset's byte order mark) are appended to ``notes``. Raises
    :class:`~gym_runtime.errors.PackageInvalidError`, a ``ConfigError`` or
    :class:`~gym_runtime.errors.DatasetError` (every bad row, with line and field).
    """
    from gym_runtime.gym_release import choose_release
    from gym_runtime.settings import load_settings

    req.check()
    pkg = load_package(req.package)
    release = choose_release(pkg, req.runtime_kwargs.get("settings") or load_settings())
    merged = build_config(pkg, req.overrides, req.policy, defaults=PLACEHOLDERS, release=release)
    agents = {i.name: i for i in merged.of_type("responses_api_agents")}
    routing = Routing.from_config(merged)
    found = routing.violations(merged.sources)
    if routing.problems:
        raise ConfigError(
            "the run-level agent routing (agent_name, agent_map, fan_out) cannot be used",
            violations=found[: len(routing.problems)],
            hint="fix the keys named, in their file or override; no row was run",
        )
    if notes is not None:
        notes += [v.render() for v in found]  # only unread keys are left: the problems raised
    rows = load_rows(req.dataset, agents, pkg.manifest.metadata.vf_env_id, notes, routing)
    facts = agent_facts(merged.instances)
    if req.limit:  # the first `limit` rows of the file, with every copy fan_out made of them
        kept = sorted({r.line for r in rows})[: req.limit]
        rows = [r for r in rows if r.line <= kept[-1]]
    return pkg.name, rows, facts


def offers_tools(rows: list[DatasetRow]) -> bool:
    """Whether any row offers tools (then the start-up probe offers one too, policy/probe.py)."""
    return any((row.data.get("responses_create_params") or {}).get("tools") for row in rows)


def make_runtime(req: DryRunRequest, progress: Callable[[str], None] | None, tools: bool):
    """The :class:`gym_runtime.Runtime` (not started) a dry-run of ``req`` runs against; ``tools``:
    the rows offer tools, so the start-up probe of the policy endpoint offers one too."""
    from gym_runtime.runtime.api import Runtime
    from gym_runtime.supervise.options import SuperviseOptions

    p = req.policy
    kwargs = dict(req.runtime_kwargs)
    if tools:
        kwargs["options"] = replace(kwargs.get("options") or SuperviseOptions(), probe_tools=True)
    rt = Runtime(
        req.package,
        overrides=req.overrides,
        policy_base_url=p.base_url,
        policy_api_key=p.api_key,
        policy_model_name=p.model_name,
        progress=progress,
        max_concurrent_rollouts=req.max_concurrent_rollouts,
        **kwargs,
    )
    rt.request.stub_seed = req.stub_seed
    return rt


async def run_dry_run(
    req: DryRunRequest,
    progress: Callable[[str], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    on_result: Callable[[RolloutResult], None] | None = None,
) -> DryRunResult:
    """Run the whole dry-run on the current event loop.

    ``progress`` receives human start-up lines; ``on_start(total_rollouts)`` is called once the
    environment is ready, ``on_result`` after each rollout. Raises what :func:`prepare` raises,
    and the start errors of :class:`gym_runtime.Runtime` (``BuildError``, ``StartError``...);
    rollout failures are results, not exceptions. The environment is always stopped.
    """
    notes: list[str] = []
    name, rows, facts = prepare(req, notes)
    for note in notes:
        if progress is not None:
            progress(f"note: {note}")
    rt = make_runtime(req, progress, offers_tools(rows))
    try:
        ready = await rt.start()
        result = await run_rows(rt, req, Prepared(name, rows, facts, notes), ready, on_start, on_result)
        await finish_learning(rt.env.bytecode, progress)
        return result
    finally:
        await rt.stop()


LEARN_WAIT_S = 60.0


async def finish_learning(
    bytecode: Any, progress: Callable[[str], None] | None = None, wait_s: float = LEARN_WAIT_S
) -> None:
    """Before a dry-run stops, let the daemon finish compiling what this run's processes imported
    (:meth:`gym_runtime.venvs.env_bytecode.EnvironmentBytecode.settled`, at most ``wait_s`` seconds), so
    the author's next dry-run starts warm instead of compiling it first. Compiling costs speed only:
    what is left after ``wait_s`` is compiled by the next start, as after a stop at any other time."""
    if await bytecode.settled(0):
        return
    if progress is not None:
        progress("bytecode: finishing what this run's processes imported, so the next run starts warm")
    await bytecode.settled(wait_s)


@dataclass(frozen=True)
class Prepared:
    """What :func:`prepare` returned (package name, rows to run, agent facts) and its notes."""

    package: str
    rows: list[DatasetRow]
    facts: dict[str, AgentFacts]
    notes: list[str] = field(default_factory=list)


async def run_rows(
    rt: Any,
    req: DryRunRequest,
    prep: Prepared,
    ready: dict[str, Any],
    on_start: Callable[[int], None] | None = None,
    on_result: Callable[[RolloutResult], None] | None = None,
) -> DryRunResult:
    """Sample every row of ``prep`` ``req.samples`` times against the started
    :class:`gym_runtime.Runtime` ``rt`` (``ready``: its ready info) and return the result; every
    rollout is written to ``req.out`` (rewritten by each call). The environment keeps running."""
    out: IO[str] | None = None
    rows = prep.rows
    agents = {n: url for n, url in rt.servers.items() if url}
    bound, replicas = rt.env.max_concurrent_rollouts(), rt.env.agent_replicas()
    if req.out is not None:
        req.out.parent.mkdir(parents=True, exist_ok=True)
        out = req.out.open("w", encoding="utf-8")
    try:

        def record(result: RolloutResult) -> None:
            if out is not None:
                out.write(json.dumps(result.to_dict()) + "\n")
                out.flush()
            if on_result is not None:
                on_result(result)

        if on_start is not None:
            on_start(len(rows) * req.samples)
        t0 = time.perf_counter()
        results = await sample_rows(
            rows, agents, req.samples, bound, record, req.rollout_timeout_s, prep.facts, replicas
        )
        wall = time.perf_counter() - t0
        replicas = rt.env.agent_replicas()  # nodes as they are now (a replica may have moved)
    finally:
        if out is not None:
            out.close()
    stats = row_stats(results)
    counts = replica_counts(((r.agent, r.replica, not r.ok) for r in results), replicas, wall)
    return DryRunResult(
        prep.package, rows, results, stats, summarize(stats, results, wall), ready, prep.notes, counts, bound
    )
