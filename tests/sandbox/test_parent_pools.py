"""A preloaded parent takes the free blocks of its object allocator's partly used pools before it
forks (``sandbox/_immortal.py``'s ``fill_pools``), so that a server's first objects land in pools
of its own, not in pages it shares with the parent, and freezes what holds them (no server's
collection walks it). Run in a fresh interpreter (the test's own,
with ``pymalloc``), the module loaded by its path as the parents load it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

IMMORTAL_PY = Path(__file__).resolve().parents[2] / "sandbox" / "_immortal.py"
# holes in many pools of four size classes (every other object of each 100,000 freed), then the fill;
# the free blocks the allocator reports before and after it, and what the fill took
PROBE = """
import gc, importlib.util, json, sys
spec = importlib.util.spec_from_file_location("_immortal", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)

def free_blocks():
    rows = [line.split() for line in m._allocator_stats().splitlines()]
    return sum(int(r[4]) for r in rows if len(r) == 5 and all(c.isdigit() for c in r))

kept = [[bytes(n) for _ in range(100_000)] for n in (20, 60, 100, 200)]
for objs in kept:
    del objs[::2]
before = free_blocks()
taken = m.fill_pools()
after = free_blocks()
print(json.dumps({"before": before, "taken": taken, "after": after, "held": len(m._FILLERS[0]),
                  "frozen": gc.get_freeze_count()}))
"""


def test_a_parent_takes_the_free_blocks_of_its_pools_before_it_forks() -> None:
    r = subprocess.run(
        [sys.executable, "-I", "-c", PROBE, str(IMMORTAL_PY)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-2000:]
    seen = json.loads(r.stdout)
    assert seen["before"] >= 200_000  # the freed half, at least
    assert seen["held"] == seen["taken"] >= seen["before"] * 0.99  # every free block it was told of
    # what is free now lies in the few pools the fill and the count themselves began
    assert seen["after"] < seen["before"] // 20, seen
    assert seen["frozen"] > 0  # what holds them is left out of every later collection
