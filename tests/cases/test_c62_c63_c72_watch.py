"""Cases C62, C63 and C72 (tests/cases/data/CNN/README.md): ``dry-run --watch`` under real editors and checkouts.

* C62: a six-file "checkout" written one file every 250 or 600 ms (the case's ``switch.py``) is one
  edit run once, on the consistent version-2 tree (mean 0.50); a start on the half-written tree
  shows no error block and runs no rows.
* C63: with this user's inotify instances used up (the case's ``hold_inotify.py`` holding all of
  them, or all but one, in a user namespace whose limit is small, so no other watcher of the host
  is starved), the watch says one warning naming ``fs.inotify.max_user_instances``, what this user
  holds and the ``sysctl`` that raises it, polls instead, and still sees an edit of the dataset.
* C72: a data file whose name is not UTF-8 (the case's ``caf\\xe9_notes.txt``) written under the
  watch restarts its server like any other file, and the watch goes on.

The servers are the cases' ``app.py`` start-up code in front of the stdlib fixture server
(``tests/helpers/daemon.py``), so no venv needs a registry. Never a traceback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cases import CASES
from tests.helpers.daemon import FIXTURE_APP, JSON_HANDLER, write_fixture_package
from tests.helpers.watch import WatchRun, mean_of, rows_of

pytestmark = [pytest.mark.slow]

# An agent that posts each row to the resources server ``switch_env``'s /verify and answers what it
# says, so the table shows which tree that server runs (the case's /verify: 1.0 on version 1, 0.5 on 2).
FORWARDING_AGENT = (
    r"""# test fixture: a stdlib agent that asks switch_env's /verify for the reward
import json, os, urllib.request
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler

blocks, cur = {}, None
for line in os.environ["NEMO_GYM_CONFIG_DICT"].splitlines():
    if not line.startswith(" "):
        cur = line[:-1]
        blocks[cur] = {}
    elif line.startswith("      ") and not line.startswith("       ") and ": " in line:
        k, v = line.strip().split(": ", 1)
        blocks[cur][k] = v.strip("'\"")
me, rs = blocks[os.environ["NEMO_GYM_CONFIG_PATH"]], blocks["switch_env"]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""
    + JSON_HANDLER
    + r"""
class H(JSONHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        req = urllib.request.Request(f"http://{rs['host']}:{rs['port']}/verify", data=body, method="POST",
                                     headers={"content-type": "application/json"})
        with opener.open(req, timeout=60) as r:
            self._send(200, json.loads(r.read()))

ThreadingHTTPServer((me["host"], int(me["port"])), H).serve_forever()
"""
)


def start_up_code(case: str) -> str:
    """The case's ``app.py`` up to its app (``app = base_app()``), less what needs its FastAPI
    helper (``gymserver``): what the server does at start-up."""
    kept = []
    for line in (CASES / case / "app.py").read_text().splitlines():
        if line.startswith("app = "):
            break
        if "gymserver" not in line and "my_config()" not in line:
            kept.append(line)
    return "\n".join(kept) + "\n"


def watch_env(tmp_path: Path) -> dict[str, str]:
    return {"GYM_RUNTIME_HOME": str(tmp_path / "home")}


def no_traceback(run: WatchRun) -> None:
    text = "".join(run.err) + "".join(run.out)
    assert "Traceback" not in text and "Exception" not in text, text[-4000:]


def c62_package(tmp_path: Path) -> tuple[Path, Path]:
    """The case's ``make.sh``: resources server ``switch_env`` importing ``part_a`` .. ``part_f``
    (each ``VERSION = 1``), refusing a mixed tree at start-up; its agent ``switch_env_agent``."""
    server = start_up_code("C62") + "V = versions.pop()\n"
    server += FIXTURE_APP.replace('row.get("fixture_reward", 1.0)', "(1.0 if V == 1 else 0.5)")
    assert "(1.0 if V == 1 else 0.5)" in server and "mixed tree" in server
    pkg = write_fixture_package(
        tmp_path / "pkg",
        {
            "switch_env": {"resources_servers": {"switch_env": {"domain": "other"}}},
            "switch_env_agent": {
                "responses_api_agents": {
                    "switch_env_agent": {"resources_server": {"type": "resources_servers", "name": "switch_env"}}
                }
            },
        },
        apps={"switch_env": server, "switch_env_agent": FORWARDING_AGENT},
        name="switch-env",
    )
    for p in "abcdef":
        (pkg / "resources_servers" / "switch_env" / f"part_{p}.py").write_text("VERSION = 1\n")
    shutil.copy(CASES / "C62" / "switch.py", tmp_path / "switch.py")  # it rewrites pkg/ beside itself
    rows = Path(shutil.copy(CASES / "C62" / "rows.jsonl", tmp_path / "rows.jsonl"))
    return pkg, rows


@pytest.mark.timeout(600)
@pytest.mark.parametrize("delay_ms", [250, 600])  # the case's run.sh default, and its worst run
def test_c62_a_checkout_written_over_seconds_runs_once_on_the_whole_tree(tmp_path: Path, delay_ms: int) -> None:
    pkg, rows = c62_package(tmp_path)
    run = WatchRun(pkg, rows, tmp_path / "run", "--samples", "1", env=watch_env(tmp_path))
    try:
        first = run.table(1)
        assert [mean_of(r) for r in rows_of(first, "switch_env_agent")] == ["1.00"], first
        run.stderr_after(0, r"for edits \(Ctrl-C stops\)")
        mark = len(run.err)
        switch = subprocess.run(
            [sys.executable, str(tmp_path / "switch.py"), str(delay_ms)], capture_output=True, text=True, timeout=120
        )
        assert switch.returncode == 0 and switch.stdout.count("wrote part_") == 6, switch.stderr
        second = run.table(2)
        assert [mean_of(r) for r in rows_of(second, "switch_env_agent")] == ["0.50"], second  # version 2

        # one more edit, of the dataset: its table is run 3, so nothing ran between the two
        rows.write_text(rows.read_text())
        run.stderr_after(mark, r"dataset: 1 row\(s\) to run")
        third = run.table(3)
        assert [mean_of(r) for r in rows_of(third, "switch_env_agent")] == ["0.50"], third
        run.stderr_after(run.stderr_after(mark, r"edit to new table") + 1, r"edit to new table")  # said after it
        after = "".join(run.err[mark:])
        assert after.count("edit to new table") == 2, after
        assert "error[" not in after and "mixed tree" not in after and "restart 1/" not in after, after
        log = (tmp_path / "run" / "logs" / "switch_env.log").read_text()
        starts = [line for line in log.splitlines() if line.startswith("C62 part versions: ")]
        assert starts[0] == "C62 part versions: [1]" and starts[-1] == "C62 part versions: [2]", log
        assert run.interrupt() == 130
        no_traceback(run)
    finally:
        run.close()


def c72_package(tmp_path: Path) -> tuple[Path, Path, bytes]:
    """The case's ``make.sh``: resources server ``csv_env`` listing its ``data/`` at start-up, which
    holds ``tasks.csv`` and ``caf\\xe9_notes.txt`` (a Latin-1 name); returns the odd file as bytes."""
    pkg = write_fixture_package(
        tmp_path / "pkg",
        {
            "csv_env": {"resources_servers": {"csv_env": {"domain": "other"}}},
            "csv_env_agent": {
                "responses_api_agents": {
                    "csv_env_agent": {"resources_server": {"type": "resources_servers", "name": "csv_env"}}
                }
            },
        },
        apps={"csv_env": start_up_code("C72") + FIXTURE_APP},
        name="csv-env",
    )
    data = pkg / "resources_servers" / "csv_env" / "data"
    data.mkdir()
    (data / "tasks.csv").write_text("id,question,answer\n1,2+2,4\n")
    odd = os.path.join(os.fsencode(data), b"caf\xe9_notes.txt")
    with open(odd, "wb") as f:
        f.write(b"legacy notes\n")
    return pkg, Path(shutil.copy(CASES / "C72" / "rows.jsonl", tmp_path / "rows.jsonl")), odd


@pytest.mark.timeout(600)
def test_c72_a_file_name_that_is_not_utf8_changing_under_the_watch_restarts_its_server(tmp_path: Path) -> None:
    pkg, rows, odd = c72_package(tmp_path)
    run = WatchRun(pkg, rows, tmp_path / "run", "--samples", "1", env=watch_env(tmp_path))
    try:
        run.table(1)
        run.stderr_after(0, r"for edits \(Ctrl-C stops\)")
        mark = len(run.err)
        with open(odd, "ab") as f:  # the case's run.sh: the odd file is written to
            f.write(b"more\n")
        run.stderr_after(mark, r"restarting csv_env$")
        second = run.table(2)
        assert [mean_of(r) for r in rows_of(second, "csv_env_agent")] == ["1.00"], second
        app = pkg / "resources_servers" / "csv_env" / "app.py"
        app.write_text(app.read_text() + "# touched\n")  # then app.py: the watch still reacts
        run.table(3)
        log = (tmp_path / "run" / "logs" / "csv_env.log").read_text()
        assert log.count("C72 data files: 2") == 3, log  # each start listed the odd name too
        assert run.interrupt() == 130
        no_traceback(run)
    finally:
        run.close()


def _userns_works() -> bool:
    if not shutil.which("unshare"):
        return False
    probe = "echo 3 > /proc/sys/user/max_inotify_instances"
    done = subprocess.run(["unshare", "--user", "--map-root-user", "sh", "-c", probe], capture_output=True, timeout=30)
    return done.returncode == 0


@pytest.mark.timeout(600)
@pytest.mark.parametrize("free", [0, 1])
def test_c63_used_up_inotify_instances_make_the_watch_poll_with_one_warning(tmp_path: Path, free: int) -> None:
    """The case holds all 128 instances of a dedicated uid; here a user namespace of its own has a
    limit of 4 (``/proc/sys/user/max_inotify_instances``, what ``fs.inotify.max_user_instances`` is
    for the host's namespace), and the case's holder takes 4 - ``free`` of them."""
    if not _userns_works():
        pytest.skip("needs unshare --user with a writable /proc/sys/user (user namespaces)")
    pkg, rows = c62_package(tmp_path)
    limit, ready = 4, tmp_path / "holder.txt"
    holder = CASES / "C63" / "hold_inotify.py"
    shell = (
        f"echo {limit} > /proc/sys/user/max_inotify_instances && "
        f'"$0" "{holder}" {limit - free} 300 > "{ready}" & '
        f'until grep -qs holding "{ready}"; do sleep 0.1; done; exec "$@"'  # -s: the file may not be made yet
    )
    prefix = ["unshare", "--user", "--map-root-user", "sh", "-c", shell, sys.executable]
    run = WatchRun(pkg, rows, tmp_path / "run", "--samples", "1", env=watch_env(tmp_path), prefix=prefix)
    try:
        run.table(1)
        watching = run.stderr_after(0, r"for edits \(Ctrl-C stops\)")
        assert f"holding {limit - free} inotify instances" in ready.read_text()
        (warning,) = [line for line in run.err[:watching] if "inotify" in line]
        assert f"this user's inotify instances are used up (fs.inotify.max_user_instances = {limit}; " in warning
        assert "this user holds " in warning and "watching by polling every 0.3 s" in warning, warning
        assert f"sudo sysctl fs.inotify.max_user_instances={max(512, 2 * limit)}" in warning, warning
        mark = len(run.err)
        with rows.open("a") as f:  # the case's run.sh: a row appended to the dataset
            f.write(rows.read_text().splitlines()[0] + "\n")
        run.stderr_after(mark, r"dataset: 2 row\(s\) to run")
        second = run.table(2)
        assert len(rows_of(second, "switch_env_agent")) == 2, second
        assert run.interrupt() == 130
        no_traceback(run)
    finally:
        run.close()  # the holder too: it is in the watch's process group
