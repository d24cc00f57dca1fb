"""The sandbox's level warning is silenced while the bring-up starts a sandbox whose warning it says
itself, or which has none to say (the stub model's launcher), and uses of that silence may
overlap: under the ``opensandbox`` backend the stub model's launcher and the environment's sandbox
start at once. A use that ends while another is open must not let the other's warning through
(it did: an unprefixed "EGRESS NOT ENFORCED" line came before an error block now and then), and
the logger gets back its state once the last use ends."""

from __future__ import annotations

import logging

import pytest

from gym_runtime.placement.local import quiet_sandbox_log


def test_overlapping_uses_stay_silent_until_the_last_one_ends(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("sandbox")
    caplog.set_level(logging.WARNING, logger="sandbox")
    first, second = quiet_sandbox_log(), quiet_sandbox_log()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # the environment's sandbox is up; the stub's launcher still probes
    log.warning("EGRESS NOT ENFORCED (isolation: none): level forced to none")
    second.__exit__(None, None, None)
    assert caplog.records == []
    assert log.disabled is False
    log.warning("said once the last use ended")
    assert [r.getMessage() for r in caplog.records] == ["said once the last use ended"]


def test_a_logger_disabled_before_stays_disabled() -> None:
    log = logging.getLogger("sandbox")
    log.disabled = True
    try:
        with quiet_sandbox_log(), quiet_sandbox_log():
            pass
        assert log.disabled is True
    finally:
        log.disabled = False
