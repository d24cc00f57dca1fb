"""Private variables (a server's config and its secrets) reach the sandboxed program alone: never
bubblewrap's environment (every process of a sandbox reads /proc/1/environ), never a command
line, also when they do not fit into a pipe's default buffer."""

from __future__ import annotations

import asyncio
import json

import pytest

from sandbox import EgressPolicy, ProcessSpec, Sandbox
from tests.sandbox._run import APPS

SECRET = "sk-private-0123456789"


@pytest.mark.parametrize("level", ["full", "partial"])
def test_private_env_reaches_only_the_program(level, full_available, tmp_path, plain_python):
    if not full_available:
        pytest.skip("bubblewrap with a user namespace is not available on this host")
    work = tmp_path / "w"
    work.mkdir()
    (work / "spec.json").write_text(json.dumps({"needle_reversed": SECRET[::-1], "var": "GR_TEST_PRIVATE"}))
    value = SECRET + "x" * 100_000  # over the 64 KiB a pipe holds by default

    async def main():
        sb = await Sandbox.start(EgressPolicy.from_environ({}), tmp_path / "sb", level=level)
        try:
            out = work / "out.json"
            with open(out, "wb") as fo, open(work / "err.txt", "wb") as fe:
                proc = sb.spawn(
                    ProcessSpec(
                        "finder",
                        [str(plain_python), str(APPS / "find_secret.py"), str(work / "spec.json")],
                        work,
                        {"PATH": "/usr/bin:/bin"},
                        read_only_paths=[plain_python.parent.parent, APPS],
                        writable_paths=[work],
                        stdout_fd=fo.fileno(),
                        stderr_fd=fe.fileno(),
                        private_env={"GR_TEST_PRIVATE": value},
                    )
                )
                outer = proc.pid
            assert await asyncio.wait_for(proc.wait(), 60) == 0, (work / "err.txt").read_text()
            return json.loads(out.read_text()), outer
        finally:
            await sb.close()

    seen, outer = asyncio.run(main())
    assert seen["own"] is True  # the program got it
    assert seen["argv"] == [str(APPS / "find_secret.py"), str(work / "spec.json")]  # exec'd as itself
    assert seen["hits"] == [], seen  # no other process it can read holds it: bubblewrap's init included
    if level == "full":
        assert 1 in seen["readable"]  # /proc/1/environ (bubblewrap) was readable, and clean
