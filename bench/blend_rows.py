"""The example rows of ``bench/blend.py``'s runs: sent through the head server, said per environment,
and compared across runs and sandbox backends (``bench/blend.py``'s module doc); prints, asserts nothing."""

from __future__ import annotations

import time
from collections import Counter

import httpx


def run_rows(head_url: str, rows: dict[str, list[dict]]) -> dict:
    """Every environment's rows in one ``POST /rollouts/run`` to the head server at ``head_url``:
    ``{"outcomes": {tree: [reward (float) or the row error's code (str), one per row in its order]},
    "rows_s": seconds the batch took}``."""
    flat = [(tree, row) for tree, rs in rows.items() for row in rs]
    t = time.monotonic()
    r = httpx.post(
        head_url + "/rollouts/run", json={"examples": [row for _, row in flat]}, timeout=1800, trust_env=False
    )
    took = time.monotonic() - t
    results = r.json()["results"] if r.status_code == 200 else []
    if len(results) != len(flat):
        results = [{"error": {"code": f"HTTP {r.status_code}"}}] * len(flat)
    outcomes: dict[str, list[float | str]] = {tree: [] for tree in rows}
    for (tree, _), res in zip(flat, results, strict=True):
        outcomes[tree].append(res["error"].get("code", "?") if "error" in res else float(res.get("reward")))
    return {"outcomes": outcomes, "rows_s": took}


def say_rows(r: dict) -> None:
    """Per environment: rows scored of rows sent, each row's reward in order, the row errors' codes."""
    parts = []
    for tree, outs in r["outcomes"].items():
        scored = [o for o in outs if isinstance(o, float)]
        errors = Counter(o for o in outs if isinstance(o, str))
        parts.append(
            f"{tree} {len(scored)}/{len(outs)}"
            + (f" [{' '.join(f'{o:g}' if isinstance(o, float) else 'x' for o in outs)}]" if outs else "")
            + (f" ({', '.join(f'{n} {c}' for c, n in errors.items())})" if errors else "")
        )
    print(f"  rows scored in {r['rows_s']:.1f} s, rewards by row: " + "; ".join(parts))


def compare_rows(done: dict[str, list[dict]]) -> None:
    """Whether every run of every backend gave each row the same outcome (its reward, or its row
    error's code) as the first run: rows matched by environment and position in its example file."""
    runs = [(b, i + 1, r["outcomes"]) for b, rs in done.items() for i, r in enumerate(rs) if "outcomes" in r]
    if not runs:
        return
    (b0, i0, ref), n = runs[0], sum(len(v) for v in runs[0][2].values())
    differ = [
        f"{b} run {i} {tree} row {k}: {got!r}, {b0} run {i0}: {want!r}"
        for b, i, outs in runs[1:]
        for tree, want_all in ref.items()
        for k, (want, got) in enumerate(zip(want_all, outs[tree], strict=True))
        if got != want
    ]
    print(
        f"rows: {len(runs)} runs ({', '.join(f'{len(rs)} {b}' for b, rs in done.items())}) of {n} rows each; "
        "each row's reward (or row error's code) against the first run's: "
        + ("the same on every row" if not differ else f"{len(differ)} differ:\n  " + "\n  ".join(differ))
    )
