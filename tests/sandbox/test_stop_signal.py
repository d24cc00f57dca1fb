"""A stop sends the app one TERM: the group signal when the app leads its own process group (every
server at isolation ``none``), else a signal to the app itself, never both (sandbox/process.py)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

from sandbox.limits import ResourceLimits
from sandbox.process import SandboxedProcess

COUNT_TERMS = r"""
import signal, sys, time
got = []
signal.signal(signal.SIGTERM, lambda *a: got.append(1))
print("ready", flush=True)
while not got:
    time.sleep(0.01)
time.sleep(0.3)  # a second TERM would land here, in the program's own cleanup
print(len(got), flush=True)
"""


def test_a_stop_sends_the_app_one_term_even_when_it_leads_its_group(monkeypatch) -> None:
    """The group signal reaches the app; a second TERM to the app itself used to follow, which a
    program handling TERM got in the middle of its cleanup (a Ray driver's exit was cut short by
    it at isolation ``none``, where each server leads its own group)."""
    sent: list[tuple[str, int, int]] = []
    real_kill, real_killpg = os.kill, os.killpg
    monkeypatch.setattr(os, "kill", lambda pid, sig: (sent.append(("kill", pid, sig)), real_kill(pid, sig))[1])
    monkeypatch.setattr(os, "killpg", lambda pg, sig: (sent.append(("killpg", pg, sig)), real_killpg(pg, sig))[1])
    popen = subprocess.Popen(
        [sys.executable, "-c", COUNT_TERMS], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    proc = SandboxedProcess("t", popen, ResourceLimits(), None, bwrapped=False)
    assert popen.stdout.readline().strip() == "ready"
    info = asyncio.run(proc.stop(grace_s=10))
    assert info.reason == "terminated" and popen.stdout.read().strip() == "1"
    terms = [s for s in sent if s[2] == signal.SIGTERM]
    assert terms == [("killpg", popen.pid, signal.SIGTERM)], sent
