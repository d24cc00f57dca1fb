"""Shared pytest fixtures.

``opensandbox_server`` is a real OpenSandbox server on podman for tests marked ``opensandbox``
(``tests/helpers/opensandbox/fixture.py``), which run only when ``-m`` selects them.

``pypi_available`` tells whether the package registry answers; tests marked ``pypi`` skip
cleanly when it does not (the check runs once per session and only contacts the registry).

The user's state root (``~/.cache/gym-runtime``, the default ``GYM_RUNTIME_HOME``) is never read
or written: the session gets its own ``GYM_RUNTIME_HOME`` before anything is collected, so
module- and session-scoped fixtures (daemons, Ray nodes) use it too, and every test then gets its own.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import warnings

import pytest

from tests.helpers.opensandbox.fixture import (  # noqa: F401 (fixtures)
    opensandbox_server,
    opensandbox_server_running,
    skip_unselected,
)
from tests.helpers.ray_cluster import LocalRayCluster
from tests.helpers.registry import registry_reachable

_SESSION_ENV = pytest.StashKey[tuple[pytest.MonkeyPatch, str]]()


def _scrub_runtime_environ(mp: pytest.MonkeyPatch) -> None:
    """Remove the user's runtime and egress settings (``GYM_RUNTIME_*`` but the suite's own
    ``GYM_RUNTIME_TESTS_*``, ``NMP_RL_SANDBOX_*``, a host's global config ``NMP_GYM_GLOBAL_CONFIG`` /
    ``NHX_GYM_GLOBAL_CONFIG``), their pip settings (``PIP_*``, and every pip
    configuration file through pip's own ``PIP_CONFIG_FILE=/dev/null``: a build's hint names pip
    index settings, docs/runtime.md) and ``PYTHONUNBUFFERED`` (a user's shell seldom sets it:
    commands must flush what they print themselves, as a pipe block-buffers it)."""
    for var in list(os.environ):
        if (
            var.startswith(("GYM_RUNTIME_", "NMP_RL_SANDBOX_", "PIP_"))
            and not var.startswith("GYM_RUNTIME_TESTS_")
            or var in ("NMP_GYM_GLOBAL_CONFIG", "NHX_GYM_GLOBAL_CONFIG")
        ):
            mp.delenv(var)
    mp.setenv("PIP_CONFIG_FILE", os.devnull)
    mp.delenv("PYTHONUNBUFFERED", raising=False)


def pytest_configure(config: pytest.Config) -> None:
    """The session's own ``GYM_RUNTIME_HOME`` (module doc), removed again at the session's end.

    SIGTERM stops the suite the way Ctrl-C does: the running test's ``with`` blocks and fixtures
    tear down, so the daemons and stub models it started (each in its own session, out of reach of
    a signal to pytest's group) stop with it instead of outliving a killed CI job."""
    mp = pytest.MonkeyPatch()
    if os.environ.get("PIP_FIND_LINKS") and not os.environ.get("GYM_RUNTIME_TESTS_FIND_LINKS"):
        # the vLLM tests' torch +cpu wheel may sit there (tests/helpers/vllm_engine.py)
        mp.setenv("GYM_RUNTIME_TESTS_FIND_LINKS", os.environ["PIP_FIND_LINKS"])
    _scrub_runtime_environ(mp)
    home = tempfile.mkdtemp(prefix="gym-runtime-session-home-")
    mp.setenv("GYM_RUNTIME_HOME", home)
    config.stash[_SESSION_ENV] = (mp, home)

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
    # The commands the tests start (and run in this process) inherit no ignored SIGHUP or SIGINT
    # from the suite's runner (`nohup`, a shell's background job): the runtime reports an inherited
    # ignore on stderr and keeps an ignored SIGHUP (case C66), which tests that read stderr from its
    # first line, or hang a daemon up, do not expect. A handler, unlike an ignore, is reset to the
    # default at exec, and this process still lets a hangup (or a Ctrl-C it ignored) pass.
    for sig in (signal.SIGHUP, signal.SIGINT):
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, _let_pass)


def _let_pass(signum: int, frame: object) -> None:
    """A handler doing nothing: the runner ignored this signal (see :func:`pytest_configure`)."""


def pytest_unconfigure(config: pytest.Config) -> None:
    mp, home = config.stash[_SESSION_ENV]
    mp.undo()
    shutil.rmtree(home, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_unselected(config, items)


@pytest.fixture(scope="session")
def pypi_available() -> bool:
    return registry_reachable()


@pytest.fixture(autouse=True)
def _skip_pypi_when_offline(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("pypi") and not request.getfixturevalue("pypi_available"):
        pytest.skip("PyPI cannot be reached from here (test marked pypi)")


@pytest.fixture(autouse=True)
def _isolated_runtime_settings(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own GYM_RUNTIME_HOME, and the user's own runtime and egress settings
    (GYM_RUNTIME_*, NMP_RL_SANDBOX_*) never leak into a test or receive its venvs and runs, and
    neither does ``PYTHONUNBUFFERED``.
    The uv cache stays shared. Tests that need a setting set it themselves. The test suite's own
    variables (``GYM_RUNTIME_TESTS_*``: offline, seed, report directory) are kept."""
    _scrub_runtime_environ(monkeypatch)
    monkeypatch.setenv("GYM_RUNTIME_HOME", str(tmp_path_factory.mktemp("gym-runtime-home")))


@pytest.fixture(autouse=True)
def _whole_ray_cluster(request: pytest.FixtureRequest) -> None:
    """A test that takes a module's test cluster (a fixture named ``cluster``,
    tests/helpers/ray_cluster.py) starts with every worker up: a worker an earlier test killed, or
    that a loaded machine's cluster dropped, is started again, and what its raylet logged is a
    warning (pytest's summary shows it even when the test then passes)."""
    if "cluster" not in request.fixturenames:
        return
    cluster = request.getfixturevalue("cluster")
    if isinstance(cluster, LocalRayCluster):
        for note in cluster.ensure_all():
            warnings.warn(note, stacklevel=1)
