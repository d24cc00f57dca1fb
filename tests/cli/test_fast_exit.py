"""The console script exits like a server venv's interpreter (gym_runtime/venvs/exit_hook.py): the
heap left when the command is done is frozen after every ``atexit`` handler ran, so finalization's
collections skip it (the daemon's exit after a stop), and the exit code is the command's."""

from __future__ import annotations

import subprocess
import sys

# A command that leaves garbage in a reference cycle (a collection would run its __del__), registers
# an atexit handler of its own, and returns 3.
PROGRAM = r"""
import atexit
from gym_runtime.cli import main as cli

class Cycle:
    def __del__(self):
        print("collected at exit", flush=True)

def command():
    a, b = Cycle(), Cycle()
    a.other, b.other = b, a
    del a, b
    atexit.register(lambda: print("command's atexit handler ran", flush=True))
    return 3

cli.main = command
cli.console()
"""


def test_the_console_script_freezes_the_heap_after_every_atexit_handler_and_keeps_the_exit_code() -> None:
    run = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60)
    assert run.returncode == 3, run.stderr
    assert "command's atexit handler ran" in run.stdout
    assert "collected at exit" not in run.stdout  # frozen: finalization's collection skipped the cycle


def test_without_the_freeze_the_same_cycle_is_collected_at_exit() -> None:
    # the control: the program above minus the console script's freeze
    plain = PROGRAM.replace("cli.console()", "import sys; sys.exit(cli.main())")
    run = subprocess.run([sys.executable, "-c", plain], capture_output=True, text=True, timeout=60)
    assert run.returncode == 3 and "collected at exit" in run.stdout, run.stdout + run.stderr
