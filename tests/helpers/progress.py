"""A server fixture prefix that draws tqdm-style progress bars with ``\\r`` and never ends the line
(the bar of case C51's ``chatty_env/app.py``): ``mb`` MB of ~80-byte redraws to stderr, then a
background bar redrawing every 0.1 s for as long as the server runs."""

from __future__ import annotations

DONE = "progress bar done"  # the line written (on a line of its own) once the ``mb`` MB are out


def progress_bar_app(mb: float, go_file: str | None = None) -> str:
    """Python source to put in front of a fixture server's ``app.py``. Without ``go_file`` the bar
    is drawn at start-up, before the server serves; with it, a thread draws it once a file of that
    name appears beside ``app.py`` (the caller decides when), then writes :data:`DONE`."""
    return f"""import sys, threading, time
from pathlib import Path
def _bar():
    total = int({mb!r} * 1024 * 1024 / 80)
    for i in range(total):
        pct = 100 * i // total
        sys.stderr.write(f"\\rLoading tasks: {{pct:3d}}%|{{'#' * (pct // 5):<20}}| {{i}}/{{total}} [00:01<00:02, 9999.9it/s]")
    sys.stderr.flush()
def _ticker():
    n = 0
    while True:
        n += 1
        sys.stderr.write(f"\\rjudge cache warm-up: {{n}} it [00:{{n % 60:02d}}, 10.0it/s]")
        sys.stderr.flush()
        time.sleep(0.1)
def _when_told(go):
    while not go.exists():
        time.sleep(0.05)
    _bar()
    sys.stderr.write("\\n{DONE}\\n")
    sys.stderr.flush()
    _ticker()
_GO = {go_file!r}
if _GO is None:
    _bar()
    threading.Thread(target=_ticker, daemon=True).start()
else:
    threading.Thread(target=_when_told, args=(Path(__file__).with_name(_GO),), daemon=True).start()
"""
