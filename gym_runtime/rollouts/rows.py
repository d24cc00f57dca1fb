"""Dataset rows (the dry-run input): read a JSONL file and check every row before anything starts.

Contract: docs/architecture.md §9 and NMP's `GymDatasetRow` schema (NMP's ``GymDatasetRow`` /
``GymVerifiersDatasetRow``, Gym's ``verifiers_agent`` run request). One JSON object per line:

- required: ``responses_create_params`` (a mapping whose ``input`` is a non-empty string or a
  list of Responses API items) and ``agent_ref: {type: responses_api_agents, name: <instance>}``
  naming a configured agent instance, unless the run-level ``agent_name`` / ``agent_map`` give the
  row its agent (:mod:`gym_runtime.rollouts.rerouting`);
- optional, type-checked: ``task_idx`` (int), ``question`` / ``answer`` / ``task`` (str),
  ``example_id`` (int or str), ``info`` (mapping), ``vf_env_id`` (str);
- rows for a ``verifiers_agent`` need an int ``task_idx`` and a ``vf_env_id`` (on the row or in
  the agent config); a row's ``vf_env_id`` must equal the agent's ``vf_env_id`` (else the
  manifest's ``metadata.vf_env_id``) when one is configured;
- every other key is forwarded to the agent untouched. Blank lines are skipped.

Under a Gym release line that has them (``routing``, :mod:`gym_runtime.rollouts.routing`): a row
may name ``task_source`` instead of ``agent_ref`` (0.6 and later); a materialized task
(``task_id: {taskset, task_id}`` plus ``task_input``, 0.7 and later) needs neither
``responses_create_params`` nor an agent; ``_ng_*`` stamps are type-checked
(:func:`gym_runtime.rollouts.tasks.stamp_problems`); and every row must have a route, so a row no
environment server can take (an agent fronted by several, a taskset without a route) is a dataset
error naming the line before anything starts (``GR-DATASET-TASK-SOURCE``,
``GR-DATASET-ENVIRONMENT-SERVER``). A row ``fan_out`` runs on several agents (0.6 and later) is
one :class:`DatasetRow` per agent, in the order listed, each its own row of the report.

Records are separated by ``\n`` only (one trailing ``\r`` is dropped, so ``\r\n`` files work);
U+2028, U+2029, U+0085, form feed and the other characters ``str.splitlines`` breaks on are data
inside a JSON string (case C27), and line numbers count ``\n``. A UTF-8 byte order mark at the start
is dropped and reported as a note, not an error.

Every problem becomes a :class:`~gym_runtime.errors.Violation` whose ``file`` is
``<path>:<line>`` and whose ``key`` is the field, all reported in one
:class:`~gym_runtime.errors.DatasetError`.

The module is long because every field of a row is checked in one pass that reports every
problem at once, in the order of the contract above.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gym_runtime.errors import DatasetError, Violation
from gym_runtime.rollouts.rerouting import missing_agent_hint
from gym_runtime.rollouts.routing import Route, RouteError, Routing
from gym_runtime.rollouts.tasks import ENVIRONMENT_SERVER_STAMP, TASK_SOURCE, is_materialized, stamp_problems

AGENT_TYPE = "responses_api_agents"
VERIFIERS_AGENT = "verifiers_agent"
MAX_REPORTED = 50
BOM = "\ufeff"
_MISSING = object()
_OPTIONAL_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "task_idx": ((int,), "an integer"),
    "question": ((str,), "a string"),
    "answer": ((str,), "a string"),
    "task": ((str,), "a string"),
    "example_id": ((int, str), "an integer or a string"),
    "info": ((dict,), "a mapping"),
    "vf_env_id": ((str,), "a string"),
}


class AgentSpec(Protocol):
    """What row checks need to know about an agent instance (a ``ServerInstance`` fits: read-only)."""

    @property
    def implementation(self) -> str: ...

    @property
    def config(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class DatasetRow:
    """One checked row: ``index`` (0-based among rows), ``line`` (1-based in the file), the
    agent instance its rollouts count for, the row object exactly as read (sent to ``/run`` as
    is, or as an episode request) and its ``route`` (None: checked without routing rules)."""

    index: int
    line: int
    agent: str
    data: dict[str, Any] = field(hash=False)
    route: Route | None = field(default=None, hash=False)


def _type_name(v: Any) -> str:
    return "null" if v is None else type(v).__name__


def _is(v: Any, types: tuple[type, ...]) -> bool:
    return isinstance(v, types) and not isinstance(v, bool)


_ROUTE_CODES = {"environment": "GR-DATASET-ENVIRONMENT-SERVER", TASK_SOURCE: "GR-DATASET-TASK-SOURCE"}


class _RowChecker:
    """Checks one row object against the agents, the manifest's ``vf_env_id`` and, when given, the
    environment's routing rules."""

    def __init__(
        self,
        where: str,
        agents: Mapping[str, AgentSpec],
        manifest_vf_env_id: str | None,
        routing: Routing | None = None,
    ) -> None:
        self.where, self.agents, self.manifest_vf, self.routing = where, agents, manifest_vf_env_id, routing

    def check(self, line: int, row: Any, fanned: str | None = None) -> tuple[list[Violation], str | None, Route | None]:
        """``(violations, the agent its rollouts count for, its route)`` of one row; ``fanned``: the
        agent of a ``fan_out`` copy."""
        file = f"{self.where}:{line}"
        if not isinstance(row, dict):
            return (
                [
                    Violation(
                        "GR-DATASET-ROW",
                        f"a row must be a JSON object, got {_type_name(row)}",
                        file=file,
                        hint="write one JSON object per line",
                    )
                ],
                None,
                None,
            )
        rt = self.routing
        task = rt is not None and rt.through_environment_servers and is_materialized(row)
        out = [] if task else self._params(file, row.get("responses_create_params", _MISSING))
        for key, (types, what) in _OPTIONAL_TYPES.items():
            if key in row and not _is(row[key], types):
                out.append(
                    Violation("GR-DATASET-FIELD", f"must be {what}, got {_type_name(row[key])}", file=file, key=key)
                )
        if rt is not None:
            out += [Violation("GR-DATASET-FIELD", what, file=file, key=key) for key, what in stamp_problems(row)]
        agent: str | None = None
        by_route = rt is not None and (
            fanned is not None
            or rt.rerouted(row)
            or "agent_ref" not in row
            and (
                task
                or ENVIRONMENT_SERVER_STAMP in row
                and rt.through_environment_servers
                or TASK_SOURCE in row
                and rt.task_source
            )
        )
        if not by_route:
            agent, ref_violations = self._agent_ref(file, row.get("agent_ref", _MISSING))
            out += ref_violations
            if agent is None:
                return out, None, None
        elif "agent_ref" in row and not isinstance(row["agent_ref"], dict):  # re-routed: still a mapping
            out.append(
                Violation(
                    "GR-DATASET-FIELD",
                    f"must be a mapping {{type, name}}, got {_type_name(row['agent_ref'])}",
                    file=file,
                    key="agent_ref",
                )
            )
        route = None
        if rt is not None and not out:
            try:
                route = rt.route(row, fanned)
            except RouteError as e:
                code = _ROUTE_CODES.get(e.kind if e.kind == "environment" else e.key, "GR-DATASET-AGENT-REF")
                return out + [Violation(code, e.message, file=file, key=e.key, hint=e.hint)], None, None
            agent = route.agent
        if agent is not None and agent in self.agents:
            out += self._vf_env(file, row, agent)
        return out, agent, route

    def _params(self, file: str, params: Any) -> list[Violation]:
        if params is _MISSING:
            return [
                Violation(
                    "GR-DATASET-MISSING-FIELD",
                    "required field is missing",
                    file=file,
                    key="responses_create_params",
                    hint='add {"responses_create_params": {"input": [{"role": "user", "content": "..."}]}}',
                )
            ]
        if not isinstance(params, dict):
            return [
                Violation(
                    "GR-DATASET-FIELD",
                    f"must be a mapping, got {_type_name(params)}",
                    file=file,
                    key="responses_create_params",
                )
            ]
        key = "responses_create_params.input"
        if "input" not in params:
            return [
                Violation(
                    "GR-DATASET-MISSING-FIELD",
                    "required field is missing (the prompt, Responses API shape)",
                    file=file,
                    key=key,
                )
            ]
        value = params["input"]
        if isinstance(value, str):
            return [] if value.strip() else [Violation("GR-DATASET-FIELD", "must not be empty", file=file, key=key)]
        if not isinstance(value, list) or not value:
            return [
                Violation(
                    "GR-DATASET-FIELD",
                    "must be a non-empty string or a non-empty list of input items, "
                    f"got {_type_name(value) if value != [] else 'an empty list'}",
                    file=file,
                    key=key,
                )
            ]
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, dict) or not ("role" in item or "type" in item):
                out.append(
                    Violation(
                        "GR-DATASET-FIELD",
                        "each input item must be an object with `role` and `content` (a message) or a `type`",
                        file=file,
                        key=f"{key}[{i}]",
                    )
                )
        return out

    def _agent_ref(self, file: str, ref: Any) -> tuple[str | None, list[Violation]]:
        known = ", ".join(sorted(self.agents)) or "(none)"
        if ref is _MISSING:
            by_map = self.routing is not None and self.routing.rerouting.overrides
            return None, [
                Violation(
                    "GR-DATASET-MISSING-FIELD",
                    "required field is missing",
                    file=file,
                    key="agent_ref",
                    hint=f"{missing_agent_hint(by_map)}; configured agents: {known}",
                )
            ]
        if not isinstance(ref, dict):
            return None, [
                Violation(
                    "GR-DATASET-FIELD",
                    f"must be a mapping {{type, name}}, got {_type_name(ref)}",
                    file=file,
                    key="agent_ref",
                )
            ]
        out = []
        if ref.get("type") != AGENT_TYPE:
            out.append(
                Violation(
                    "GR-DATASET-AGENT-REF",
                    f"type must be {AGENT_TYPE!r}, got {ref.get('type')!r}",
                    file=file,
                    key="agent_ref.type",
                )
            )
        name = ref.get("name")
        if not isinstance(name, str) or not name:
            out.append(
                Violation(
                    "GR-DATASET-MISSING-FIELD" if name is None else "GR-DATASET-FIELD",
                    "must name an agent instance",
                    file=file,
                    key="agent_ref.name",
                    hint=f"configured agents: {known}",
                )
            )
            return None, out
        if name not in self.agents:
            close = difflib.get_close_matches(name, list(self.agents), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            out.append(
                Violation(
                    "GR-DATASET-AGENT-REF",
                    f"agent {name!r} is not a configured {AGENT_TYPE} instance",
                    file=file,
                    key="agent_ref.name",
                    hint=f"{hint}configured agents: {known} (use the instance name, not the implementation folder)",
                )
            )
            return None, out
        return name, out

    def _vf_env(self, file: str, row: dict[str, Any], agent: str) -> list[Violation]:
        spec = self.agents[agent]
        agent_vf = spec.config.get("vf_env_id") or None
        expected = agent_vf or self.manifest_vf
        got = row.get("vf_env_id")
        out = []
        if isinstance(got, str) and expected and got != expected:
            origin = f"agent {agent!r}" if agent_vf else "the manifest's metadata.vf_env_id"
            out.append(
                Violation(
                    "GR-DATASET-VF-ENV-ID",
                    f"vf_env_id {got!r} != expected {expected!r} (from {origin})",
                    file=file,
                    key="vf_env_id",
                    hint="fix the row, or regenerate the dataset for this environment",
                )
            )
        if spec.implementation == VERIFIERS_AGENT:
            if "task_idx" not in row:
                out.append(
                    Violation(
                        "GR-DATASET-MISSING-FIELD",
                        f"required for rows sent to {VERIFIERS_AGENT} (agent {agent!r})",
                        file=file,
                        key="task_idx",
                        hint="task_idx is the index of the example in the verifiers dataset",
                    )
                )
            if not got and not agent_vf:
                out.append(
                    Violation(
                        "GR-DATASET-MISSING-FIELD",
                        f"required: agent {agent!r} has no vf_env_id in "
                        "its config, so the row must name the environment",
                        file=file,
                        key="vf_env_id",
                    )
                )
        return out


def records(text: str) -> list[tuple[int, str]]:
    """``(line number, record)`` of JSONL ``text``: split on ``\n`` only, one trailing ``\r`` of each
    record dropped; numbers are 1-based and count ``\n`` (never ``str.splitlines``, case C27)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [(n, line[:-1] if line.endswith("\r") else line) for n, line in enumerate(lines, start=1)]


def parse_rows(
    text: str,
    where: str,
    agents: Mapping[str, AgentSpec],
    manifest_vf_env_id: str | None = None,
    notes: list[str] | None = None,
    routing: Routing | None = None,
) -> list[DatasetRow]:
    """Parse and check JSONL ``text``; ``where`` names the file in messages.

    ``agents`` maps agent instance names to their spec (implementation, resolved config);
    ``routing`` the environment's routing rules (None: every row names its agent with ``agent_ref``).
    Returns the rows in file order. A leading byte order mark is dropped and a sentence saying so
    is appended to ``notes`` (when given). Raises :class:`DatasetError` listing every problem (the
    first :data:`MAX_REPORTED`), or when the file holds no row at all.
    """
    if text.startswith(BOM):
        text = text[len(BOM) :]
        if notes is not None:
            notes.append(f"dataset {where} starts with a UTF-8 byte order mark (BOM); it was ignored")
    checker = _RowChecker(where, agents, manifest_vf_env_id, routing)
    rows: list[DatasetRow] = []
    problems: list[Violation] = []
    for line_no, line in records(text):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            problems.append(
                Violation(
                    "GR-DATASET-JSON",
                    f"not valid JSON at column {e.colno}: {e.msg}",
                    file=f"{where}:{line_no}",
                    hint="one JSON object per line (JSONL)",
                )
            )
            continue
        except (RecursionError, ValueError) as e:  # nested past the parser's depth; a number over 4300 digits
            what = "nested too deeply" if isinstance(e, RecursionError) else str(e).split(";")[0]
            problems.append(
                Violation(
                    "GR-DATASET-JSON",
                    f"JSON that cannot be read: {what}",
                    file=f"{where}:{line_no}",
                    hint="one JSON object per line (JSONL)",
                )
            )
            continue
        faults: dict[Violation, None] = {}  # a fault every copy of a fanned row shares is said once
        for target, body in routing.copies(obj) if routing is not None and isinstance(obj, dict) else [(None, obj)]:
            found, agent, route = checker.check(line_no, body, target)
            faults.update(dict.fromkeys(found))
            if not found and agent is not None:
                rows.append(DatasetRow(len(rows), line_no, agent, dict(body), route))
        problems += faults
    if problems:
        shown = problems[:MAX_REPORTED]
        more = len(problems) - len(shown)
        lines = len({v.file for v in problems})
        raise DatasetError(
            f"dataset {where} has {len(problems)} problem{'s' if len(problems) != 1 else ''} "
            f"on {lines} line{'s' if lines != 1 else ''}" + (f" (first {len(shown)} shown)" if more else ""),
            violations=shown,
            hint="fix the rows; no row was run",
        )
    if not rows:
        raise DatasetError(
            f"dataset {where} holds no rows",
            hint="one JSON object per line, see docs/environment-packages.md (Dataset rows)",
        )
    return rows


def load_rows(
    path: str | Path,
    agents: Mapping[str, AgentSpec],
    manifest_vf_env_id: str | None = None,
    notes: list[str] | None = None,
    routing: Routing | None = None,
) -> list[DatasetRow]:
    """Read and check the JSONL file at ``path`` (see :func:`parse_rows`; bytes are decoded as
    UTF-8 without newline translation, so only ``\n`` ends a record).

    Raises :class:`DatasetError` for a missing/unreadable/non-UTF-8 file or bad rows.
    """
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise DatasetError(
            f"dataset file not found: {p} (looked for {p.absolute()})",
            hint="check the path given to --dataset: a relative path is read from the current "
            "directory, not from the package",
        ) from None
    except IsADirectoryError:
        raise DatasetError(f"dataset path is a directory: {p}", hint="pass the .jsonl file itself") from None
    except UnicodeDecodeError as e:
        raise DatasetError(f"dataset {p} is not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise DatasetError(f"dataset {p} cannot be read: {e.strerror}") from None
    return parse_rows(text, str(p), agents, manifest_vf_env_id, notes, routing)
