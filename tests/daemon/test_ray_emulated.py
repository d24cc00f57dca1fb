"""A private Ray head is refused at once where the Ray venv's binaries run through an interpreter
(CPU emulation: qemu-user under binfmt_misc), since no Ray driver could find its raylet there
(gym_runtime/ray/head.py ``check_native``; docs/container.md, "arm64 under emulation").

A ``#!/bin/sh`` script standing in for the venv's ``python`` is started by the kernel through
``/bin/sh`` just as a foreign-architecture binary is started through qemu's interpreter: the
first word of its ``/proc/PID/cmdline`` is the interpreter, not the program."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gym_runtime.errors import EXIT_RUNTIME, StartError
from gym_runtime.ray.head import check_native, interpreter_of


def _interpreted_venv(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    python.write_text("#!/bin/sh\nwhile read -r line; do :; done\n")  # ends when its stdin closes, as the probe expects
    python.chmod(0o755)
    (bin_dir / "ray").write_text("")
    return bin_dir / "ray"


def test_a_python_that_runs_as_itself_has_no_interpreter() -> None:
    assert interpreter_of(Path(sys.executable)) is None
    check_native(Path(sys.executable).with_name("ray"), "needed by a")  # raises nothing


def test_a_python_run_through_an_interpreter_is_named_and_the_head_refused(tmp_path: Path) -> None:
    ray_bin = _interpreted_venv(tmp_path)
    assert interpreter_of(ray_bin.with_name("python")) == "/bin/sh"
    with pytest.raises(StartError) as err:
        check_native(ray_bin, "needed by example_single_tool_call_environment_server")
    e = err.value
    assert e.code == "GR-RAY-EMULATED" and e.exit_code == EXIT_RUNTIME
    text = str(e)
    assert "needed by example_single_tool_call_environment_server" in text and "through /bin/sh" in text
    assert str(ray_bin.with_name("python")) in text and "raylet" in text
