"""The ``opensandbox_server`` fixture: one real OpenSandbox server per test session (docs/runtime.md, "What the tests cover, and what they do not").

Tests marked ``opensandbox`` run only when selected (``pytest -m opensandbox``; ``.ci/run`` does):
the README's ``./uvw run pytest`` skips them saying how to select them. Selected, the fixture skips
naming what is missing where the server cannot run here (not root, podman / runc / debuerreotype
not installable, no Debian mirror, PyPI unreachable for a first install), and fails where it is
installed but does not come up. It yields :class:`tests.helpers.opensandbox.server.OpenSandboxServer`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.helpers.debian_base import BaseUnavailable
from tests.helpers.opensandbox.images import Images, ensure_images
from tests.helpers.opensandbox.server import OpenSandboxServer, OpenSandboxUnavailable, running_server, server_venv

MARKER = "opensandbox"


def selected(config: pytest.Config) -> bool:
    """Whether ``-m`` selects the marker (``-m opensandbox``, ``-m "opensandbox and ..."``)."""
    expr = config.getoption("markexpr") or ""
    return MARKER in expr and f"not {MARKER}" not in expr


def skip_unselected(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests marked ``opensandbox`` skipped unless ``-m`` selects them (at collection, so
    the session-scoped server never starts for them)."""
    if selected(config):
        return
    skip = pytest.mark.skip(reason="starts a real OpenSandbox server on podman: select it with `pytest -m opensandbox`")
    for item in items:
        if item.get_closest_marker(MARKER):
            item.add_marker(skip)


def images_or_skip() -> Images:
    """The test images (made when missing) with the server installed; skips the test naming what
    is missing where the server cannot run here (module doc)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (rootful podman's Docker API, debootstrap)")
    try:
        images = ensure_images()
        server_venv()
    except (BaseUnavailable, OpenSandboxUnavailable) as e:
        pytest.skip(f"the OpenSandbox server cannot run here: {e}")
    if images.seconds:
        print(f"opensandbox images made: {images.seconds}")
    return images


@pytest.fixture(scope="session")
def opensandbox_server() -> Iterator[OpenSandboxServer]:
    images = images_or_skip()
    with running_server(images.sandbox, images.execd) as server:
        print(f"opensandbox-server {server.version} at {server.domain} up in {server.start_seconds[0]} s")
        yield server


@pytest.fixture(autouse=True)
def opensandbox_server_running(request: pytest.FixtureRequest) -> None:
    """Before each test that uses ``opensandbox_server``: its process is started again if a test
    before it stopped it (the outage tests do) and failed before starting it, so one failure stays
    one failure."""
    if "opensandbox_server" in request.fixturenames:
        request.getfixturevalue("opensandbox_server").start_if_stopped()
