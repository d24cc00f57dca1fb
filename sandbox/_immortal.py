"""Immortal objects for a preloaded parent (PEP 683): what both parents call after their imports'
``gc.collect()`` and before ``gc.freeze()``, so that the servers they fork share those pages.

Stdlib only, and never imported by the daemon: it runs with the venv's interpreter, in the
parent's own process. ``sandbox/_zygote.py`` (run as a script) loads it from its path beside
itself; ``sandbox/opensandbox/groups.py`` puts this text before ``sandbox/opensandbox/_parent.py``'s in
the command it sends (``python -c``), so it holds nothing that must come first in a module
(no ``from __future__`` import) and defines only :data:`IMMORTAL` and :func:`immortalize`.
"""

import ctypes
import gc
import sys

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
