"""A fast interpreter exit for every process of a server venv.

A Gym server holds millions of objects (its SDK, openai, pydantic models, Ray's driver). When it
stops, uvicorn closes the port within a fraction of a second, but CPython's finalization then runs
a full garbage collection over that heap: 3-4 s of one core per server, measured on a real NeMo
Gym 0.4.0 tree (py-spy: ``gc_collect_main`` with no Python frame left), during which the daemon
waits and a pod's grace period runs. Objects alive at exit need no collection: CPython does not
promise ``__del__`` for them ("It is not guaranteed that ``__del__()`` methods are called for
objects that still exist when the interpreter exits", Python reference, data model).

So each venv gets one ``.pth`` line, run by ``site`` at every start of its interpreter, that
registers ``gc.freeze`` with ``atexit``: registered before any program code, it runs after every
handler the program registers (``atexit`` runs handlers last-in, first-out), and moves every object
then alive into the permanent generation, which finalization's collections skip. Exit codes,
``atexit`` handlers and stream flushing are unchanged. Measured on the real Gym trees: a server's
exit after SIGTERM 4.9-5.2 s -> 1.2-1.3 s (load average 9, 2 cores).
"""

from __future__ import annotations

from pathlib import Path

HOOK_NAME = "_gym_runtime_exit.pth"
HOOK_LINE = "import atexit, gc; atexit.register(gc.freeze)\n"


def install_exit_hook(venv: Path) -> Path:
    """Write the hook into ``venv``'s site-packages (every ``lib/python*/site-packages``); returns
    the first file written. Raises ``FileNotFoundError`` when the venv has no site-packages."""
    written = [d / HOOK_NAME for d in sorted((venv / "lib").glob("python*/site-packages")) if d.is_dir()]
    if not written:
        raise FileNotFoundError(f"no site-packages under {venv / 'lib'}")
    for path in written:
        path.write_text(HOOK_LINE)
    return written[0]
