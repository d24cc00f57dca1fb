"""Where a forked server's own pages come from: prints figures for a running ``gym-runtime up``,
asserts nothing.

    ./uvw run python bench/server_pages.py --head http://127.0.0.1:PORT    (as root)

A server forked from its venv's preloaded parent shares the parent's pages until it writes one;
its USS is the pages it holds alone. This sorts them, per forked server, by where they come from:

* *copied*: a page the parent has at the same address, copied on the server's first write to it
  (copy-on-write). Split by how many of its 512 8-byte words differ from the parent's page now:
  1-4 words (a page copied for a few writes: the waste the immortal objects and ``gc.freeze()``
  remove for reference counts and the collector), 5-64, more;
* *fresh*: a page at an address the parent maps, which the parent does not hold now (never
  touched, or given back): the server's own allocations in the parent's heap or arenas;
* *own*: a page at an address the parent does not map (the server's own heap growth, arenas,
  thread stacks).

Each page copied for 1-4 words is put down to the objects its changed words lie in: every object
the parent held is immortal (``sandbox/_immortal.py``), so an object starts at the nearest word at
or before the change that holds the immortal reference count (within 64 KiB), and the word after
that points to its type, whose ``tp_name`` names it (``?``: no such word in the mapping). A
heuristic: a change in the bytes before an object (the collector's links, 3.12's managed-dict
pointers) is put down to the object before; one in the first 48 bytes of a 16 KiB-aligned
anonymous block is a ``pymalloc`` pool's header (``pool header``). A page counts once per type it
changed, so the types' sum exceeds the pages'; the twelve largest are printed, the rest as
``other``. The code objects lead: CPython 3.12 and 3.13 specialize
bytecode in place, so an instruction not yet specialized counts down a counter inside its code
object each time it runs (``Python/specialize.c``), and every function a server runs writes the
page its code lies in.

The servers and their parents come from the head server's ``GET /processes`` (role ``server``, and
the ``preloaded parent`` of the sandbox), under the ``local`` backend (an ``opensandbox`` server's
processes are not this host's); a server started on its own (no parent) is skipped, and one that
exits during the scan is said and skipped.
Needs root: a page's frame number (``/proc/PID/pagemap``) and its map count (``/proc/kpagecount``,
which says whether another process maps it) are read as root only.
"""

from __future__ import annotations

import argparse
import bisect
import struct
import sys
from collections import Counter
from pathlib import Path

import httpx
import psutil

PAGE = 4096
MIB = 2**20
PRESENT, PFN_MASK = 1 << 63, (1 << 55) - 1


def writable_maps(pid: int) -> list[tuple[int, int, str]]:
    """(start, end, name) of the writable mappings of ``pid`` (``anon`` for an anonymous one)."""
    out = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split()
        if "w" not in parts[1]:
            continue
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        out.append((lo, hi, parts[5] if len(parts) > 5 else "anon"))
    return out


def entries(pid: int, lo: int, hi: int) -> tuple[int, ...]:
    """The pagemap entries of ``pid``'s pages ``lo``..``hi`` (one 64-bit entry per page)."""
    with open(f"/proc/{pid}/pagemap", "rb") as f:
        f.seek(lo // PAGE * 8)
        data = f.read((hi - lo) // PAGE * 8)
    return struct.unpack(f"{len(data) // 8}Q", data)


IMMORTAL = struct.pack("Q", 0xFFFFFFFF)  # CPython 3.12/3.13's immortal reference count, 64-bit


class Objects:
    """The memory of ``pid`` (a preloaded parent, every object of which is immortal): its pages,
    and what object an address lies in, by the name of its type (module doc). Raises OSError
    (``PermissionError`` when not root) when its memory cannot be opened."""

    def __init__(self, pid: int) -> None:
        self.mem = open(f"/proc/{pid}/mem", "rb", buffering=0)  # noqa: SIM115 - read for the bench's whole run
        self.names: dict[int, str] = {}

    def read(self, addr: int, n: int) -> bytes:
        """Up to ``n`` bytes at ``addr`` (b"" where nothing is mapped there)."""
        try:
            self.mem.seek(addr)
            return self.mem.read(n) or b""
        except (OSError, ValueError, OverflowError):  # unmapped, or no address at all
            return b""

    def type_name(self, addr: int, start: int, anonymous: bool, reach: int = 1 << 16) -> str:
        """The type's name of the object ``addr`` lies in, looked for back to ``start`` (its
        mapping's first address) and at most ``reach`` bytes; ``pool header`` or ``?``."""
        if anonymous and addr % (1 << 14) < 48:
            return "pool header"
        lo = max(addr - reach, start)
        data = self.read(lo, addr - lo + 8)
        at = len(data)
        while (at := data.rfind(IMMORTAL, 0, at)) >= 0:
            if at % 8 == 0:
                return self._name(struct.unpack("Q", self.read(lo + at + 8, 8) or bytes(8))[0])
        return "?"

    def _name(self, tp: int) -> str:
        if tp not in self.names:
            ptr = self.read(tp + 24, 8)  # tp_name, after the variable-size object header
            raw = self.read(struct.unpack("Q", ptr)[0], 64) if len(ptr) == 8 else b""
            self.names[tp] = raw.split(b"\0")[0].decode("latin-1") or "?"
        return self.names[tp]

    def close(self) -> None:
        self.mem.close()


def classify(parent: Objects, parent_pid: int, server: int) -> tuple[Counter, Counter]:
    """Pages (counts) of ``server`` it holds alone, by origin (module doc), and the pages copied for
    1-4 words by the type of the objects they changed in (a page counts once per type). Raises
    OSError when the server's memory cannot be read (it exited; not root)."""
    got: Counter = Counter()
    by_type: Counter = Counter()
    inherited = sorted((lo, hi, name) for lo, hi, name in writable_maps(parent_pid))
    starts = [lo for lo, _, _ in inherited]

    def inside(addr: int) -> tuple[int, int, str] | None:
        k = bisect.bisect_right(starts, addr) - 1
        return inherited[k] if k >= 0 and addr < inherited[k][1] else None

    with open("/proc/kpagecount", "rb") as kpc, open(f"/proc/{server}/mem", "rb", buffering=0) as smem:
        for lo, hi, _name in writable_maps(server):
            mine, theirs = entries(server, lo, hi), entries(parent_pid, lo, hi)
            for i, e in enumerate(mine):
                pfn = e & PFN_MASK
                if not e & PRESENT or not pfn:
                    continue
                kpc.seek(pfn * 8)
                if struct.unpack("Q", kpc.read(8))[0] != 1:
                    continue  # shared with the parent or a sibling
                addr = lo + i * PAGE
                where = inside(addr)
                if where is None:
                    got["own"] += 1
                    continue
                if not (i < len(theirs) and theirs[i] & PRESENT):
                    got["fresh"] += 1
                    continue
                smem.seek(addr)
                a, b = parent.read(addr, PAGE), smem.read(PAGE)
                if len(a) != PAGE or len(b) != PAGE:
                    continue
                olds, news = struct.unpack("512Q", a), struct.unpack("512Q", b)
                diff = [w for w, (o, n) in enumerate(zip(olds, news, strict=True)) if o != n]
                if len(diff) <= 4:
                    got["copied, 1-4 words"] += 1
                    by_type.update({parent.type_name(addr + 8 * w, where[0], where[2] == "anon") for w in diff})
                elif len(diff) <= 64:
                    got["copied, 5-64 words"] += 1
                else:
                    got["copied, more"] += 1
    return got, by_type


def main() -> None:
    """Print the figures of the ``up`` whose head server ``--head`` names (module doc)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--head", required=True, help="the head server's URL (the ready line's head_server)")
    args = ap.parse_args()
    rows = httpx.get(f"{args.head.rstrip('/')}/processes", timeout=10).json()["processes"]
    parents = {r["pid"] for r in rows if r.get("component") == "preloaded parent"}
    total: Counter = Counter()
    objects: dict[int, Objects] = {}
    types: Counter = Counter()
    kinds = ("copied, 1-4 words", "copied, 5-64 words", "copied, more", "fresh", "own")
    for r in rows:
        if r.get("role") != "server" or r.get("pid") is None:
            continue
        try:
            proc = psutil.Process(r["pid"])
            parent = proc.ppid()
            if parent not in parents:
                continue
            uss = proc.memory_full_info().uss / MIB
        except psutil.Error:
            continue
        try:
            if parent not in objects:
                objects[parent] = Objects(parent)
            got, by_type = classify(objects[parent], parent, proc.pid)
        except OSError as e:
            print(f"{r.get('member') or proc.pid}: not read ({e})", file=sys.stderr)
            continue
        types += by_type
        total += got
        pages = ", ".join(f"{k} {got[k] * PAGE / MIB:.1f}" for k in kinds)
        print(f"{r.get('member') or proc.pid}: USS {uss:.1f} MiB; {pages} MiB")
    for o in objects.values():
        o.close()
    if not total:
        print("no forked server found (GET /processes lists none with a preloaded parent)", file=sys.stderr)
        return
    print(f"all: {', '.join(f'{k} {total[k] * PAGE / MIB:.1f}' for k in kinds)} MiB")
    print(
        "pages copied for 1-4 words, by the type of what changed: "
        + ", ".join(f"{name} {n * PAGE / MIB:.1f}" for name, n in types.most_common(12))
        + f", other {sum(n for _, n in types.most_common()[12:]) * PAGE / MIB:.1f} MiB"
    )


if __name__ == "__main__":
    main()
