"""The tests against a real vLLM engine (marker ``vllm``; docs/rollouts.md "A real vLLM engine").

``engine(profile)`` gives a running vLLM OpenAI server on the tiny model. One engine runs at a
time (about 1.2 GB and a core each): asking for another profile stops the current one first, and
the tests of one profile sit together in their files so each engine starts once. Where vLLM cannot
be installed (:class:`~tests.helpers.vllm_engine.VLLMUnavailable`) every test here is skipped with
the reason, or fails with it where ``GYM_RUNTIME_TESTS_REQUIRE_VLLM=1`` (``.ci/run`` sets it: CI
must not pass without them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers.vllm_engine import VLLMServer, VLLMUnavailable, tiny_model, vllm_venv

# serve flags of each profile
PROFILES = {
    # tool calls (hermes) and reasoning (qwen3): what a Qwen-style policy is served with
    "tools": ("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3"),
    # neither: vLLM's defaults
    "plain": (),
}
MAX_MODEL_LEN = 1024
REQUIRED = "GYM_RUNTIME_TESTS_REQUIRE_VLLM"


def unavailable(reason: str) -> None:
    """Skip with ``reason``, or fail with it where :data:`REQUIRED` is ``1`` (module doc)."""
    if os.environ.get(REQUIRED) == "1":
        pytest.fail(f"{reason} ({REQUIRED}=1: the vllm tests must run here)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def vllm_ready(request: pytest.FixtureRequest, pypi_available: bool) -> Path:
    """The tiny model's directory once vLLM is installed (waiting for ``.ci/provision-vllm`` while it
    installs); skips with the reason otherwise (fails under :data:`REQUIRED`).

    Runs only when selected (``-m vllm``, which ``.ci/run`` runs after the suite): the README's
    ``pytest`` leaves out the install, the engines' starts and the engines' gigabytes of memory
    (docs/rollouts.md, "A real vLLM engine")."""
    if "vllm" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("starts a real vLLM engine: select it with `pytest -m vllm` (docs/rollouts.md)")
    if not pypi_available:
        unavailable("PyPI cannot be reached from here (installing vLLM needs it)")
    try:
        vllm_venv()
        return tiny_model()
    except VLLMUnavailable as exc:
        unavailable(f"vLLM cannot run here: {exc}")


@pytest.fixture(scope="session")
def engine(vllm_ready: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], VLLMServer]]:
    logs = tmp_path_factory.mktemp("vllm-logs")
    current: dict[str, VLLMServer] = {}

    def get(profile: str) -> VLLMServer:
        if profile in current:
            return current[profile]
        for other in list(current):
            current.pop(other).stop()
        try:
            server = VLLMServer(logs, PROFILES[profile], MAX_MODEL_LEN).__enter__()
        except VLLMUnavailable as exc:
            pytest.fail(str(exc))
        current[profile] = server
        return server

    yield get
    for server in current.values():
        server.stop()
