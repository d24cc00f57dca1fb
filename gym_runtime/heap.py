"""The daemon's heap: what its start freed, given back to the system."""

from __future__ import annotations


def return_free_heap() -> bool:
    """Give the heap that start-up freed back to the system, once, at the ready line: the daemon's
    peak is its start (config merge, venv plan, bring-up), and glibc keeps what was freed in its
    arenas for reuse; ``malloc_trim(0)`` returns every whole free page of them (``malloc_trim(3)``:
    inside the arenas too, by ``madvise``, since glibc 2.8), ~4 MiB of the daemon's ~60 MiB PSS
    under NeMo Gym 0.7.0's 4-server example (docs/performance.md). False where the C library has
    no ``malloc_trim`` (musl): nothing is done."""
    import ctypes

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except AttributeError:
        return False
    trim(0)
    return True
