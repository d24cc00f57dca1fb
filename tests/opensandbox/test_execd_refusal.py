"""An execd that refuses the runtime's command API, against a real OpenSandbox server
(opensandbox-server 1.1.1 on podman) whose execd stand-in answers as an execd of another version
would (``EXECD_STANDIN_REFUSE``: ``token``, 401 without ``X-EXECD-ACCESS-TOKEN`` as OpenSandbox
1.3's HMAC auth answers; ``gone``, 404 for a removed route): ``dry-run`` of the bundled example
exits 3 with one ``GR-OSB-EXECD`` block naming the sandbox, the server's version, the route, the
status, execd's words and the fix, prints nothing else but progress lines (no relay traceback,
no ``CancelledError``, no ``last log line: None``), and leaves no sandbox (docs/runtime.md,
"Sandbox backends")."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.opensandbox.spec import LABEL_OWNER, RunLabels
from tests.helpers.debian_base import BaseUnavailable
from tests.helpers.opensandbox.fixture import images_or_skip
from tests.helpers.opensandbox.images import refusing_execd_image
from tests.helpers.opensandbox.runs import daemon_env, dry_run_example
from tests.helpers.opensandbox.server import OpenSandboxServer, running_server

pytestmark = [pytest.mark.opensandbox, pytest.mark.slow]

REFUSALS = {
    "token": ("HTTP 401", "[UNAUTHORIZED] missing X-EXECD-ACCESS-TOKEN header"),
    "gone": ("HTTP 404", "[NOT_FOUND] no route POST /command"),
}
PROGRESS = re.compile(r"^\[\d\d:\d\d:\d\d\] ")


@pytest.fixture(scope="module", params=sorted(REFUSALS))
def refusing_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, OpenSandboxServer]]:
    images = images_or_skip()
    try:
        execd = refusing_execd_image(images, request.param)
    except BaseUnavailable as e:
        pytest.skip(f"the refusing execd image cannot be made here: {e}")
    with running_server(images.sandbox, execd) as server:
        yield request.param, server


def test_an_execd_refusing_the_command_api_is_one_block(refusing_server, tmp_path: Path) -> None:
    mode, server = refusing_server
    status, words = REFUSALS[mode]
    r = dry_run_example(
        daemon_env(server, tmp_path / "home", backend="local"),  # the flag wins
        tmp_path / "out.jsonl",
        tmp_path / "run",
        "--sandbox-backend",
        "opensandbox",
    )
    assert r.returncode == 3, r.stderr[-4000:]
    assert r.stderr.count("error[") == 1 and "error[GR-OSB-EXECD]" in r.stderr, r.stderr[-4000:]
    before, block = r.stderr.split("error[GR-OSB-EXECD]: ")
    assert all(PROGRESS.match(line) for line in before.splitlines()), before
    message, cause, hint = block.splitlines()[:3]
    found = re.fullmatch(
        r"execd in sandbox ([0-9a-f-]{36}) \(server '(\w+(?:\+\d+)?)'\) on the OpenSandbox server (\S+) \(version (\S+)\) "
        r"refused POST /command: (HTTP \d+)",
        message,
    )
    assert found is not None, message
    assert found.group(3, 4, 5) == (f"http://{server.domain}", "1.1.1", status)
    assert cause == f"cause: execd said: {words}"
    assert hint.startswith("hint: its execd speaks another command API than opensandbox 1.1.x's") and (
        "execd_image" in hint
    )
    for noise in ("Traceback", "Exception in ASGI application", "CancelledError", "last log line: None"):
        assert noise not in r.stdout + r.stderr, noise
    assert server.api_key not in r.stdout + r.stderr
    # the refused sandbox and the run's others deleted (the podman storage is the host's: other runs may list theirs)
    owner = RunLabels.new(tmp_path / "run", socket.gethostname()).owner
    assert server.sandboxes(**{LABEL_OWNER: owner}) == []
    assert [c for c in server.containers() if (c.get("Labels") or {}).get(LABEL_OWNER) == owner] == []
    assert found.group(1) not in {box["id"] for box in server.sandboxes()}
