"""Where a forked server's own pages come from: prints figures for a running ``gym-runtime up``,
asserts nothing.

    ./uvw run python bench/server_pages.py --head http://127.0.0.1:PORT    (as root)

A server forked from its venv's preloaded parent shares the parent's pages until it writes one;
its USS is the pages it holds alone. This sorts them, per forked server, by where they come from:

* *copied*: a page the parent has at the same address, copied on the server's first write to it
  (copy-on-write). Split by how many of its 512 8-byte words differ from the parent's page now:
  1-4 words (a page copied for a few writes: the waste the immortal objects and ``gc.freeze()``
  remove for reference counts and the collector), 5-64, more;
* *fresh*: a page of a mapping the parent has, which the parent never touched (the server's own
  allocations in the parent's heap or arenas);
* *new*: pages of mappings the parent does not have (the server's own heap growth, arenas,
  thread stacks).

Each page copied for 1-4 words is put down to the objects its changed words lie in: every object
the parent held is immortal (``sandbox/_immortal.py``), so an object starts at the nearest word at
or before the change that holds the immortal reference count (within 64 KiB), and the word after
that points to its type, whose ``tp_name`` names it (``?``: no such word). A heuristic: a change in
the bytes between two objects (a collector's links before one) is put down to the object before.
A page counts once per type it changed. The code objects lead: CPython 3.12 and 3.13 specialize
bytecode in place, so an instruction not yet specialized counts down a counter inside its code
object each time it runs (``Python/specialize.c``), and every function a server runs writes the
page its code lies in.

The servers and their parents come from the head server's ``GET /processes`` (role ``server``, and
the ``preloaded parent`` of the sandbox); a server started on its own (no parent) is skipped.
Needs root: a page's frame number (``/proc/PID/pagemap``) and its map count (``/proc/kpagecount``,
which says whether another process maps it) are read as root only.
"""

from __future__ import annotations

import argparse
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
    """What object of ``pid`` (a preloaded parent, every object of which is immortal) an address lies
    in, by the name of its type (module doc)."""

    def __init__(self, pid: int) -> None:
        self.mem = open(f"/proc/{pid}/mem", "rb")  # noqa: SIM115 - read for the bench's whole run
        self.names: dict[int, str] = {}

    def read(self, addr: int, n: int) -> bytes:
        try:
            self.mem.seek(addr)
            return self.mem.read(n)
        except (OSError, ValueError, OverflowError):  # unmapped, or no address at all
            return b""

    def type_name(self, addr: int, reach: int = 1 << 16) -> str:
        lo = max(addr - reach, 0)
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


def classify(parent: int, server: int, objects: Objects) -> tuple[Counter, Counter]:
    """Pages (counts) of ``server`` it holds alone, by origin (module doc), and the pages copied for
    1-4 words by the type of the objects they changed in (a page counts once per type)."""
    got: Counter = Counter()
    by_type: Counter = Counter()
    inherited = writable_maps(parent)
    with open("/proc/kpagecount", "rb") as kpc, open(f"/proc/{parent}/mem", "rb") as pmem:
        with open(f"/proc/{server}/mem", "rb") as smem:
            for lo, hi, _name in writable_maps(server):
                own = entries(server, lo, hi)
                if not any(plo <= lo < phi for plo, phi, _ in inherited):
                    got["new"] += sum(1 for e in own if e & PRESENT)
                    continue
                theirs = entries(parent, lo, hi)
                for i, e in enumerate(own):
                    pfn = e & PFN_MASK
                    if not e & PRESENT or not pfn:
                        continue
                    kpc.seek(pfn * 8)
                    if struct.unpack("Q", kpc.read(8))[0] != 1:
                        continue  # shared with the parent or a sibling
                    if not (i < len(theirs) and theirs[i] & PRESENT):
                        got["fresh"] += 1
                        continue
                    addr = lo + i * PAGE
                    try:
                        pmem.seek(addr)
                        smem.seek(addr)
                        a, b = pmem.read(PAGE), smem.read(PAGE)
                    except OSError:
                        continue
                    olds, news = struct.unpack("512Q", a), struct.unpack("512Q", b)
                    diff = [w for w, (o, n) in enumerate(zip(olds, news, strict=True)) if o != n]
                    if len(diff) <= 4:
                        got["copied, 1-4 words"] += 1
                        by_type.update({objects.type_name(addr + 8 * w) for w in diff})
                    elif len(diff) <= 64:
                        got["copied, 5-64 words"] += 1
                    else:
                        got["copied, more"] += 1
    return got, by_type


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--head", required=True, help="the head server's URL (the ready line's head_server)")
    args = ap.parse_args()
    rows = httpx.get(f"{args.head.rstrip('/')}/processes", timeout=10).json()["processes"]
    parents = {r["pid"] for r in rows if r.get("component") == "preloaded parent"}
    total: Counter = Counter()
    objects: dict[int, Objects] = {}
    types: Counter = Counter()
    kinds = ("copied, 1-4 words", "copied, 5-64 words", "copied, more", "fresh", "new")
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
        got, by_type = classify(parent, proc.pid, objects.setdefault(parent, Objects(parent)))
        types += by_type
        total += got
        pages = ", ".join(f"{k} {got[k] * PAGE / MIB:.1f}" for k in kinds)
        print(f"{r.get('member') or proc.pid}: USS {uss:.1f} MiB; {pages} MiB")
    if not total:
        print("no forked server found (GET /processes lists none with a preloaded parent)", file=sys.stderr)
        return
    print(f"all: {', '.join(f'{k} {total[k] * PAGE / MIB:.1f}' for k in kinds)} MiB")
    print(
        "pages copied for 1-4 words, by the type of what changed: "
        + ", ".join(f"{name} {n * PAGE / MIB:.1f}" for name, n in types.most_common(12))
        + " MiB"
    )


if __name__ == "__main__":
    main()
