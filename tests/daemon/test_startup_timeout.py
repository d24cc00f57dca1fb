"""A start that times out names, per server, what was seen (C06's kind: not one lumped "0/2 ready"):
process alive or not, port bound or not, HTTP answered or not, the last log line, and how long each
step took. Real processes in the real sandbox: one never binds its port, one binds it but never
answers HTTP."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from gym_runtime.errors import StartError
from gym_runtime.supervise import Supervisor
from tests.daemon.conftest import add_member, fast_options, start_sandbox

SLEEPER = "import time\nprint('loading weights', flush=True)\ntime.sleep(3600)\n"
MUTE = (
    "import socket, sys, time\ns = socket.socket()\ns.bind(('127.0.0.1', int(sys.argv[1])))\ns.listen(16)\n"
    "print('listening, answering nothing', flush=True)\ntime.sleep(3600)\n"
)


def test_timeout_report_names_what_was_seen_of_each_server(tmp_path: Path, run) -> None:
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    (tmp_path / "mute.py").write_text(MUTE)

    async def main():
        sb = await start_sandbox(tmp_path / "sb")
        sup = Supervisor(fast_options(server_ready_timeout_s=5.0))
        sleeper = await add_member(
            sup, sb, "acme_sleeper", [sys.executable, str(tmp_path / "sleeper.py")], tmp_path, tmp_path / "logs"
        )
        mute = await add_member(
            sup, sb, "acme_mute", [sys.executable, str(tmp_path / "mute.py"), "{port}"], tmp_path, tmp_path / "logs"
        )
        try:
            with pytest.raises(StartError) as e:
                await sup.start()
            return e.value, sleeper, mute
        finally:
            sup.request_stop()
            await sup.wait_stopped()
            await sb.close()

    err, sleeper, mute = run(main())
    assert err.code == "GR-START-TIMEOUT" and "not ready: acme_sleeper, acme_mute" in err.message
    lines = {ln.split(":", 1)[0]: ln for ln in err.extra["servers_seen"]}
    s, m = lines["acme_sleeper"], lines["acme_mute"]
    assert re.search(r"process alive \(pid \d+\) for \d+\.\ds", s)
    assert f"port {sleeper.port} not bound in " in s and "GET / not answered" in s
    assert s.endswith("last log line: 'loading weights'")
    bound = float(re.search(rf"port {mute.port} bound after (\d+\.\d)s", m).group(1))
    assert bound < 3.0  # it binds at once; seen on the first checks, not when the probe gave up
    assert "GET / not answered (no answer within 2s) in the " in m
    assert m.endswith("last log line: 'listening, answering nothing'")
    assert "what start-up saw of each server not ready:" in err.render()
