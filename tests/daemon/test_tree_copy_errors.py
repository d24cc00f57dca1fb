"""Without bubblewrap each server runs from a private copy of its tree (docs/runtime.md, "Trees
without bubblewrap"); a tree that cannot be copied stops the start naming the server, the tree and
the cause (``GR-START-TREE-COPY``), before any server runs, and leaves no half copy behind."""

from __future__ import annotations

import os

from tests.helpers.daemon import kill_tree, up_process, write_fixture_package


def test_a_tree_that_cannot_be_copied_stops_the_start_naming_it(tmp_path):
    instances = {"acme_pipe": {"resources_servers": {"acme_pipe": {"domain": "other"}}}}
    pkg = write_fixture_package(tmp_path / "pkg", instances, name="acme-pipe")
    tree = pkg / "resources_servers" / "acme_pipe"
    os.mkfifo(tree / "events.fifo")  # a named pipe has no bytes to copy
    proc = up_process(pkg, tmp_path, "--isolation", "none")
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        kill_tree(proc)
    said = " ".join(err.split())
    assert proc.returncode == 3, err[-3000:]
    assert "error[GR-START-TREE-COPY]: server 'acme_pipe': its tree" in said, said[-3000:]
    assert "events.fifo" in said and "named pipe" in said
    assert "acme_pipe: ready" not in said  # no server was started
    assert not list((tmp_path / "run").rglob("trees/*"))  # nothing of the copies is left
    assert sorted(p.name for p in tree.iterdir()) == ["app.py", "configs", "events.fifo", "requirements.txt"]
