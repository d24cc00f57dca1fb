"""`up --help` states the supervision defaults (a user waited 600 s on an unreachable endpoint
without knowing the deadline)."""

from __future__ import annotations

import pytest

from gym_runtime.cli.main import main
from gym_runtime.supervise.options import SuperviseOptions


def test_supervision_flags_show_their_defaults(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["up", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    d = SuperviseOptions()
    assert f"0 skips the check (default {d.model_endpoint_timeout_s})" in text
    assert f"TERM -> KILL seconds (default {d.shutdown_grace_s})" in text
