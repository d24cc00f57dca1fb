"""A start-up stopped on request (SIGTERM/SIGINT, ``Runtime.stop``): exit 130, like a shell's Ctrl-C.

``up``'s exit codes (its ``--help``; README): 0 after a requested stop once ready, 130 when the stop
came before ready, whatever phase it hit (config, venv builds, server start). A venv build cancelled
by that stop (``GR-BUILD-CANCELLED``) is reported the same way.
"""

from __future__ import annotations

from gym_runtime.errors import GymRuntimeError, StartError

EXIT_INTERRUPTED = 130


class StartInterrupted(StartError):
    """The environment was asked to stop before it was ready (exit 130)."""

    code = "GR-START-INTERRUPTED"
    exit_code = EXIT_INTERRUPTED


def as_interrupted(err: GymRuntimeError, phase: str) -> GymRuntimeError:
    """``err`` as a :class:`StartInterrupted` when it only says that a stop request cancelled the
    work (``GR-BUILD-CANCELLED``), else ``err`` unchanged."""
    if err.code == "GR-BUILD-CANCELLED":
        return StartInterrupted(f"start-up was interrupted during phase {phase!r}: {err.message}")
    return err
