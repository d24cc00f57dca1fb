"""Shared by the tests of cases C38-C46 (rollouts a trainer can trust): the bundled example's rows,
a dry-run against a fake policy endpoint, and what it wrote.

Each case is described in words (no input files): a test builds its inputs with these helpers,
:mod:`tests.helpers.fake_policy` (the endpoint answering the case's payload) and
:func:`tests.helpers.environments.mixed_env` (a package with a fixture resources server from
``tests/cases/apps/``). Venvs of the built-in servers come from PyPI (tests are marked ``pypi``).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.examples.conftest import EXAMPLES, Run, dry_run

QUICKSTART = EXAMPLES / "native-quickstart"
MODEL = "acme-policy"
ENV = {"GYM_RUNTIME_POLICY_API_KEY": "dummy"}
APPS = Path(__file__).resolve().parents[1] / "cases" / "apps"


def example_rows(agent: str) -> list[dict]:
    """The bundled example's rows for ``agent`` (``code_lookup_agent`` rows offer ``get_code``)."""
    rows = [json.loads(line) for line in (EXAMPLES / "native-quickstart.jsonl").read_text().splitlines() if line]
    return [r for r in rows if r["agent_ref"]["name"] == agent]


def write_rows(tmp: Path, rows: list[dict], name: str = "rows.jsonl") -> Path:
    path = tmp / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def dry(
    tmp: Path,
    rows: list[dict],
    *args: str,
    pkg: Path = QUICKSTART,
    fake_url: str | None = None,
    samples: int = 1,
    env: dict | None = None,
    timeout: float = 400,
) -> tuple[Run, list[dict]]:
    """``dry-run PKG --dataset ROWS --json --out OUT`` (against ``fake_url``'s ``/v1`` when given);
    the run and the ``--out`` lines."""
    out = tmp / "out.jsonl"
    policy = ["--policy-base-url", fake_url + "/v1", "--policy-model-name", MODEL] if fake_url else []
    run = dry_run(
        pkg,
        write_rows(tmp, rows),
        "--samples",
        str(samples),
        "--json",
        "--out",
        str(out),
        *policy,
        *args,
        env={**ENV, **(env or {})},
        timeout=timeout,
    )
    results = [json.loads(line) for line in out.read_text().splitlines()] if out.is_file() else []
    return run, results
