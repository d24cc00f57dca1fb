"""A prober in the example's sandbox (a command of its own, run through execd as the servers' are;
the example's servers share one venv, so one sandbox: sandbox/opensandbox/groups.py) cannot read
the policy key the model server holds there, nor the host's files; the probe finds the key in its
own command line (the probe works)."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import pytest

from tests.helpers.daemon import read_ready_line, up_process
from tests.helpers.opensandbox.runs import EXAMPLE, daemon_env
from tests.opensandbox.test_backend import _instances, _run_labels, home  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.opensandbox, pytest.mark.slow]
KEY = "probe-secret-5f1c2d"
PROBE = """
import json, os, sys
key, host_file = sys.argv[1].encode(), sys.argv[2]
hits = []
for p in os.listdir('/proc'):
    if p.isdigit():
        for f in ('environ', 'cmdline'):
            try:
                if key in open(f'/proc/{p}/{f}', 'rb').read():
                    hits.append(open(f'/proc/{p}/cmdline', 'rb').read().split(b'\\0')[1].decode(errors='replace'))
            except (OSError, IndexError):
                pass
print(json.dumps({"hits": hits, "marker": os.path.exists('/tmp/model-marker'), "host_file": os.path.exists(host_file),
                  "init": open('/proc/1/cmdline', 'rb').read().split(b'\\0')[0].decode()}))
"""


async def _run(server, box_id: str, argv: list[str]) -> str:
    from opensandbox.models.execd import RunCommandOpts
    from opensandbox.sandbox import Sandbox

    box = await Sandbox.connect(box_id, connection_config=server.connection_config())
    try:
        ex = await box.commands.run(argv, opts=RunCommandOpts(background=True))
        for _ in range(100):
            st = await box.commands.get_command_status(ex.id)
            if st.running is False:
                break
            await asyncio.sleep(0.1)
        return (await box.commands.get_background_command_logs(ex.id, None)).content
    finally:
        await box.close()


def test_a_prober_sees_no_key_and_no_host(opensandbox_server, home: Path, tmp_path: Path) -> None:
    server = opensandbox_server
    host_file = tmp_path / "host-only.txt"
    host_file.write_text("on the host")
    proc = up_process(EXAMPLE, tmp_path, env={**daemon_env(server, home), "GYM_RUNTIME_POLICY_API_KEY": KEY})
    ready = json.loads(read_ready_line(proc, timeout=600))
    try:
        boxes = {s["process_name"]: s["sandbox"] for s in _instances(ready)}
        assert boxes["policy_model"] == boxes["arithmetic"] == boxes["code_lookup_agent"], boxes  # one venv
        seen = json.loads(
            asyncio.run(_run(server, boxes["arithmetic"], ["/usr/bin/python3", "-c", PROBE, KEY, str(host_file)]))
        )
        # the probe's own command line holds the key; nothing else of the sandbox it can read does: the
        # model server, beside it, is not dumpable (groups.LAUNCHER), so its environment is not readable
        assert "-c" in seen["hits"] and [h for h in seen["hits"] if h != "-c"] == [], seen
        assert seen["host_file"] is False, seen
        assert seen["init"] != "/sbin/init"  # its own pid namespace: the sandbox's entrypoint is pid 1
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(120)
        err = proc.stderr.read()
    assert code == 0, err[-3000:]
    assert KEY not in err and _run_labels(server) == {}
