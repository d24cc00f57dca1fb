"""A tree that needs the network at start-up, with egress denied, or that writes into its own
install directory, gets a clear start error.

Some Gym trees clone a repository or download data when their server starts (NeMo Gym 0.4.0
``resources_servers/newton_bench`` clones from GitHub, ``ifbench`` downloads NLTK data). Under the
default egress policy the sandbox's proxy denies the request, the server exits, and the supervisor
restarts it until it gives up: the error must say that the server was denied egress, to which
host, and what the operator can do (``GR-START-EGRESS``), not only show a crash loop's log tail.
``newton_bench`` also clones into its install directory (the venv's ``site-packages``), which is
read-only in the sandbox, as the package is: the error says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.daemon import FIXTURE_APP, kill_tree, up_process, write_fixture_package

CLONING_APP = FIXTURE_APP.replace(
    'time.sleep(float(cfg.get("fixture_sleep", 0)))',
    """import urllib.request
print("fetching the tree's data repository", flush=True)
urllib.request.urlopen("https://clone.example.invalid/acme/data.git", timeout=20)  # honours HTTPS_PROXY""",
)


def test_server_denied_egress_at_start_up_is_named(tmp_path: Path) -> None:
    assert CLONING_APP != FIXTURE_APP
    pkg = write_fixture_package(
        tmp_path / "pkg",
        {"acme_clone": {"resources_servers": {"acme_clone": {"domain": "other"}}}},
        apps={"acme_clone": CLONING_APP},
    )
    proc = up_process(pkg, tmp_path, "--max-restarts", "1")
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        kill_tree(proc)
    assert proc.returncode == 3 and out == ""
    assert "error[GR-START-EGRESS]" in err, err[-3000:]
    assert "acme_clone was denied egress to clone.example.invalid:443" in err
    assert "this tree needs the network at start-up, and egress is denied" in err
    assert "NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW=clone.example.invalid" in err
    assert "Traceback" not in err.split("cause:")[0]  # the tree's traceback is in the log tail only


WRITING_APP = FIXTURE_APP.replace(
    'time.sleep(float(cfg.get("fixture_sleep", 0)))',
    """
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "downloaded.bin"), "w") as f:
    f.write("data the tree fetched at start-up")""",
)


def test_server_writing_into_its_read_only_tree_is_told_so(tmp_path: Path) -> None:
    from sandbox import probe_isolation

    if probe_isolation().level.value == "none":
        pytest.skip("at isolation none nothing is read-only")
    pkg = write_fixture_package(
        tmp_path / "pkg",
        {"acme_dl": {"resources_servers": {"acme_dl": {"domain": "other"}}}},
        apps={"acme_dl": WRITING_APP},
    )
    proc = up_process(pkg, tmp_path, "--max-restarts", "1")
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        kill_tree(proc)
    assert proc.returncode == 3 and "error[GR-START-CRASH]" in err, err[-3000:]
    assert "acme_dl tried to write where the sandbox is read-only (its package and venv are read-only" in err
    assert "ship that content in the package, make the tree write under $HOME or /tmp" in err
    assert "GYM_RUNTIME_WRITABLE_TREES=acme_dl" in err  # or a copy-on-write view of its tree
    assert not (pkg / "resources_servers/acme_dl/downloaded.bin").exists()


def _host_name_on_loopback() -> str:
    """This host's own name, when it resolves here into a special range (as Debian's ``127.0.1.1``
    line maps it), else the test is skipped."""
    import socket

    from sandbox import probe_isolation
    from sandbox.policy import special_network

    if probe_isolation().level.value == "none":
        pytest.skip("at isolation none nothing is denied")
    name = socket.gethostname()
    try:
        addr = socket.gethostbyname(name)
    except OSError:
        pytest.skip(f"this host's name {name!r} does not resolve here")
    if special_network(addr) is None:
        pytest.skip(f"this host's name {name!r} resolves to a public address ({addr})")
    return name


def test_a_name_of_the_host_itself_gets_a_hint_that_does_not_loop(tmp_path: Path) -> None:
    """Case C58 (tests/cases/data/C58/README.md), "following the hint exactly": a server that
    looks up the host's own name, with that name allowlisted as the old hint said, was refused for
    the address the name resolves to, and told the same hint again. The error now says so, and
    the hint no longer offers the allowlist."""
    host = _host_name_on_loopback()
    app = FIXTURE_APP.replace(
        'time.sleep(float(cfg.get("fixture_sleep", 0)))',
        f"""import socket
print("resolving", {host!r}, flush=True)
socket.gethostbyname({host!r})""",
    )
    pkg = write_fixture_package(
        tmp_path / "pkg",
        {"kernel_env": {"resources_servers": {"kernel_env": {"domain": "coding"}}}},
        apps={"kernel_env": app},
    )
    proc = up_process(
        pkg,
        tmp_path,
        "--max-restarts",
        "1",
        env={"NMP_RL_SANDBOX_ALLOW_INTERNET": "true", "NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW": host},
    )
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        kill_tree(proc)
    assert proc.returncode == 3 and "error[GR-START-EGRESS]" in err, err[-3000:]
    head, hint = err.split("cause:")[0], err.split("\nhint:")[-1]
    assert f"kernel_env looked up {host} (resolves to " in head
    assert "is never reached from the sandbox, whatever the allowlist" in head
    assert "NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW=" not in hint  # the loop: the same allowlist offered again
    assert "allowing the name does not help" in hint and "gym-sandbox" in hint
    assert f"{host}:443" not in err  # a lookup has no port


def test_a_denied_lookup_names_no_port(tmp_path: Path) -> None:
    """A client that resolves a name itself (no proxy) and is refused: the error names the lookup,
    not a made-up port 443 (case C58's first run)."""
    from sandbox import probe_isolation

    if probe_isolation().level.value == "none":
        pytest.skip("at isolation none the lookup is the host's own")
    app = FIXTURE_APP.replace(
        'time.sleep(float(cfg.get("fixture_sleep", 0)))',
        """import socket
socket.gethostbyname("data.example.invalid")""",
    )
    pkg = write_fixture_package(
        tmp_path / "pkg", {"acme_dns": {"resources_servers": {"acme_dns": {"domain": "other"}}}}, apps={"acme_dns": app}
    )
    proc = up_process(pkg, tmp_path, "--max-restarts", "1")
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        kill_tree(proc)
    assert proc.returncode == 3 and "error[GR-START-EGRESS]" in err, err[-3000:]
    assert "acme_dns was denied egress to data.example.invalid (DNS lookup)" in err
    assert "NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW=data.example.invalid" in err and "data.example.invalid:443" not in err
