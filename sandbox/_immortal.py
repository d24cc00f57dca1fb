"""What a preloaded parent does to its memory after its imports and before its first fork, so
that the servers it forks share its pages: :func:`immortalize` (after ``gc.collect()``, before
``gc.freeze()``) and :func:`fill_pools` (last).

Stdlib only, and never imported by the daemon: it runs with the venv's interpreter, in the
parent's own process. ``sandbox/_zygote.py`` (run as a script) loads it from its path beside
itself; ``sandbox/opensandbox/groups.py`` puts this text before ``sandbox/opensandbox/_parent.py``'s in
the command it sends (``python -c``), so it holds nothing that must come first in a module
(no ``from __future__`` import) and defines only :data:`IMMORTAL`, :func:`immortalize`,
:func:`fill_pools` and what they keep (``_FILLERS``).
"""

import ctypes
import gc
import os
import sys

_FILLERS: list = []  # what fill_pools() made, held for the parent's life
IMMORTAL = 0xFFFFFFFF  # CPython 3.12 and 3.13's _Py_IMMORTAL_REFCNT on a 64-bit build (Include/object.h)


def immortalize():
    """Make every object the parent holds immortal (PEP 683), so that the servers forked from it
    never write its pages by reference counting; returns how many were made so. In a forked
    server every object it reads has its count changed, and the 4 KiB page it lies in is copied
    for that server alone; an immortal object's count is never written (``Py_INCREF`` and
    ``Py_DECREF`` pass over it) and it is never freed (its pages, shared with the parent and the
    siblings, cost a server nothing). What is held: the objects the collector tracks, and
    everything they refer to (strings, numbers, code), walked. A string interned as mortal keeps
    that state: at the interpreter's finalization the interned table's two references are added
    back and dropped with the table, and both pass over an immortal count (CPython 3.13
    ``Objects/unicodeobject.c``, ``_PyUnicode_ClearInterned``: ``_Py_RefcntAdd``, then
    ``Py_DECREF``); 3.12 interns only immortal strings. Done only where the layout is known: CPython 3.12 and 3.13 on a 64-bit build with
    the GIL, which mark an immortal object by the count :data:`IMMORTAL` (``None`` has it);
    elsewhere nothing is done (0). What a server sees: an inherited object's count no longer says
    how many hold it (``sys.getrefcount`` answers ``IMMORTAL``; numpy's ``ndarray.resize`` refuses
    such an array unless told ``refcheck=False``). About 0.6-1.5 s on a loaded 2-core host for the ~570,000 objects of NeMo
    Gym 0.7.0's SDK (docs/performance.md)."""
    if (
        sys.implementation.name != "cpython"
        or sys.version_info[:2] not in ((3, 12), (3, 13))
        or sys.maxsize <= 2**32
        or not getattr(sys, "_is_gil_enabled", lambda: True)()
        or sys.getrefcount(None) != IMMORTAL
    ):
        return 0
    todo, made, count, referents, cell = gc.get_objects(), 0, sys.getrefcount, gc.get_referents, ctypes.c_ssize_t
    while todo:
        obj = todo.pop()
        if count(obj) >= IMMORTAL:
            continue
        cell.from_address(id(obj)).value = IMMORTAL  # ob_refcnt, the object's first field
        made += 1
        todo.extend(referents(obj))
    return made


def _allocator_stats():
    """The text ``sys._debugmallocstats()`` prints to the C stderr (CPython's
    ``Objects/obmalloc.c``, ``_PyObject_DebugMallocStats``), read through a memory file; None where
    it cannot be read."""
    try:
        fd = os.memfd_create("mallocstats", os.MFD_CLOEXEC)
    except OSError:
        return None
    try:
        saved = os.dup(2)
        try:
            os.dup2(fd, 2)
            try:
                sys._debugmallocstats()
            finally:
                os.dup2(saved, 2)
        finally:
            os.close(saved)
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks).decode("latin-1")
    except OSError:
        return None
    finally:
        os.close(fd)


def fill_pools():
    """Take every free block of the object allocator's partly used pools, and hold what took them;
    returns how many blocks (0 where nothing is done). The servers forked next then make their
    objects in pools of their own: a free block left in a pool the parent uses lies in a page it
    shares, so a server's first object there copies that page, parent's objects and all, for the
    few bytes it writes (``bench/server_pages.py`` sorts such copies by what they were made for;
    ~1 MiB a server of NeMo Gym 0.7.0's example, docs/performance.md).

    The free blocks per size class: the ``avail blocks`` column of the table
    ``sys._debugmallocstats()`` prints (``pymalloc``: 16-byte classes up to 512 bytes on a 64-bit
    build). A block of each class is taken by an object of exactly that size, none of which a
    freelist holds: ``object()`` (16 bytes), an int of two 30-bit digits (32), ``bytes`` of
    ``size - 33`` bytes (the rest: a 32-byte header and the trailing NUL,
    ``Include/cpython/bytesobject.h``). What holds them is frozen with the rest (``gc.freeze()``),
    so that no server's collection walks it. Nothing is done on a 32-bit build, under the
    development mode or another allocator (``PYTHONMALLOC``: the blocks' sizes differ), or where
    the statistics cannot be read (no ``memfd_create``)."""
    if (
        sys.maxsize <= 2**32
        or sys.flags.dev_mode
        or os.environ.get("PYTHONMALLOC", "pymalloc") != "pymalloc"
        or not hasattr(sys, "_debugmallocstats")
        or not hasattr(os, "memfd_create")
        or (text := _allocator_stats()) is None
    ):
        return 0
    free = {}
    for line in text.splitlines():
        cols = line.split()  # class, size, num pools, blocks in use, avail blocks
        if len(cols) == 5 and all(c.isdigit() for c in cols) and int(cols[1]) % 16 == 0:
            free[int(cols[1])] = int(cols[4])
    held = [None] * sum(free.values())  # one allocation, outside the pools (over 512 bytes)
    i, two_digits = 0, 1 << 30
    for size, n in sorted(free.items()):
        for _ in range(n):
            held[i] = object() if size == 16 else two_digits + i if size == 32 else bytes(size - 33)
            i += 1
    _FILLERS.append(held)
    gc.freeze()
    return i
