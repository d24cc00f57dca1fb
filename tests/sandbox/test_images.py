"""Images for task sandboxes: references resolve to a root filesystem the operator provides (an
unpacked directory, an OCI layout, an OCI archive) or to the host root; a missing one names every
place looked (docs/runtime.md, "Task sandboxes")."""

from __future__ import annotations

import asyncio
import concurrent.futures

import pytest

from sandbox import EgressPolicy, probe_isolation
from sandbox.images import ImageNotFound, ImageStore, normalize, parse_image_map, ref_path
from sandbox.taskbox import BoxLimits, TaskBox, box_support
from tests.helpers.rootfs import mini_rootfs, oci_archive, oci_layout

SPAWNER = concurrent.futures.ThreadPoolExecutor(1)


def test_reference_normalisation():
    assert normalize("python:3.12-slim") == "docker.io/library/python:3.12-slim"
    assert normalize("docker://ubuntu") == "docker.io/library/ubuntu:latest"
    assert normalize("ghcr.io/acme/box:1") == "ghcr.io/acme/box:1"
    assert normalize("localhost:5000/x") == "localhost:5000/x:latest"
    assert str(ref_path("python:3.12-slim")) == "docker.io/library/python/3.12-slim"
    assert str(ref_path("acme/img@sha256:ab")) == "docker.io/acme/img/sha256_ab"
    assert parse_image_map("python:3.12-slim=host, *=/srv/rootfs") == {
        "docker.io/library/python:3.12-slim": "host",
        "*": "/srv/rootfs",
    }
    with pytest.raises(ValueError, match="absolute"):
        parse_image_map("x=relative/path")


def test_missing_image_names_every_place_looked(tmp_path):
    store = ImageStore([tmp_path / "a", tmp_path / "b"], tmp_path / "cache", {})
    with pytest.raises(ImageNotFound) as e:
        store.resolve("python:3.12-slim")
    msg = str(e.value)
    assert "'python:3.12-slim'" in msg
    assert str(tmp_path / "a" / "docker.io/library/python/3.12-slim") in msg and str(tmp_path / "b") in msg
    assert store.resolve(None).kind == "host"
    mapped = ImageStore([], tmp_path / "cache", parse_image_map("*=host")).resolve("anything:1")
    assert mapped.kind == "host" and "GYM_RUNTIME_SANDBOX_IMAGE_MAP" in mapped.source


def test_rootfs_layout_and_archive_with_whiteouts(tmp_path):
    rootfs = mini_rootfs(tmp_path / "rootfs")
    images = tmp_path / "images"
    plain = images / ref_path("acme/plain:1")
    plain.parent.mkdir(parents=True)
    plain.symlink_to(rootfs)
    oci_layout(
        rootfs,
        images / ref_path("acme/layout:1"),
        env=["PATH=/bin:/usr/bin", "GREETING=hi"],
        workdir="/srv",
        whiteouts={"bin/.wh.ls": b"", "etc/motd": b"layer two\n"},
    )
    oci_archive(oci_layout(rootfs, tmp_path / "l2"), (images / ref_path("acme/archive:1")).with_suffix(".tar"))
    store = ImageStore([images], tmp_path / "cache", {})
    assert store.resolve("acme/plain:1").path == rootfs.resolve()
    layout = store.resolve("acme/layout:1")
    assert layout.kind == "rootfs" and layout.default_env()["GREETING"] == "hi" and layout.default_workdir() == "/srv"
    assert not (layout.path / "bin/ls").exists() and (layout.path / "bin/cat").exists()
    assert (layout.path / "etc/motd").read_text() == "layer two\n"
    assert store.resolve("acme/layout:1").path == layout.path  # unpacked once
    archive = store.resolve("acme/archive:1")
    assert (archive.path / "bin/ls").exists()

    support = box_support(probe_isolation())
    if isinstance(support, str):
        pytest.skip(support)

    async def main():
        box = await TaskBox.start("srv/img", layout, tmp_path / "box", BoxLimits(), EgressPolicy(), SPAWNER, *support)
        try:
            r = await box.exec(["/bin/sh", "-c", "pwd; echo $GREETING; cat /etc/motd; echo new > /bin/added"])
            assert r.stdout == b"/srv\nhi\nlayer two\n", r
        finally:
            await box.close()
        assert not (layout.path / "bin/added").exists()  # writes stay in the box's own layer

    asyncio.run(main())
