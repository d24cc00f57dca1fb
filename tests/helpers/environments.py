"""Environment packages that mix the built-in servers with stdlib fixture servers, and a running
``gym-runtime up`` as a context manager (the reliability tests).

:func:`mixed_env` writes a native-v1 package: a ``policy_model`` (the built-in ``vllm_model``,
configured by a configs-only directory as ``examples/native-quickstart`` does), one built-in
``simple_agent`` per fixture resources server, and the fixture servers themselves (a script from
``tests/reliability/apps/`` as ``app.py``, a comment-only ``requirements.txt``: stdlib, tiny venv).
The built-in servers' venvs come from PyPI (tests using them are marked ``pypi``); pass
:func:`shared_venvs` as the environment to reuse the bundled example's cached venvs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import yaml

from tests.helpers.daemon import kill_tree, read_ready_line, up_process
from tests.helpers.gym_package import cache_dir
from tests.helpers.gym_servers import REPO, Running, free_port, wait_ready

APPS = Path(__file__).resolve().parents[1] / "reliability" / "apps"
POLICY = {
    "policy_model": {
        "responses_api_models": {
            "vllm_model": {
                "entrypoint": "app.py",
                "base_url": "${policy_base_url}",
                "api_key": "${policy_api_key}",
                "model": "${policy_model_name}",
                "return_token_id_information": False,
                "uses_reasoning_parser": False,
            }
        }
    }
}


def shared_venvs() -> dict[str, str]:
    """``GYM_RUNTIME_VENV_DIR`` of the tests' shared venv cache (built-in servers' venvs reused)."""
    return {"GYM_RUNTIME_VENV_DIR": str(cache_dir() / "venvs")}


def mixed_env(
    root: Path,
    fixtures: dict[str, tuple[str | Path, dict]],
    policy: dict | None = None,
    agent: dict | None = None,
    name: str = "acme-reliability",
) -> Path:
    """Write the package at ``root``. ``fixtures``: resources server instance -> (script name in
    ``tests/reliability/apps/``, its instance config); each gets an agent ``<instance>_agent``
    (built-in ``simple_agent``, ``agent`` merged into its config). ``policy`` is merged into the
    ``policy_model``'s config. A script may also be a path to a fixture elsewhere (the cases'
    ``tests/cases/apps/``). Returns ``root``."""
    configs: dict[str, dict] = {}
    pm = json.loads(json.dumps(POLICY))
    pm["policy_model"]["responses_api_models"]["vllm_model"].update(policy or {})
    configs["responses_api_models/vllm_model/configs/policy_model.yaml"] = pm
    agents = {}
    for inst, (script, cfg) in fixtures.items():
        impl = inst
        d = root / "resources_servers" / impl
        (d / "configs").mkdir(parents=True, exist_ok=True)
        (d / "app.py").write_text((APPS / script).read_text())
        (d / "requirements.txt").write_text("# stdlib only\n")
        configs[f"resources_servers/{impl}/configs/{impl}.yaml"] = {
            inst: {"resources_servers": {impl: {"entrypoint": "app.py", "domain": "other", **cfg}}}
        }
        agents[f"{inst}_agent"] = {
            "responses_api_agents": {
                "simple_agent": {
                    "entrypoint": "app.py",
                    "resources_server": {"type": "resources_servers", "name": inst},
                    "model_server": {"type": "responses_api_models", "name": "policy_model"},
                    "max_steps": 2,
                    **(agent or {}),
                }
            }
        }
    configs["responses_api_agents/simple_agent/configs/agents.yaml"] = agents
    for rel, data in configs.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(yaml.safe_dump(data, sort_keys=False))
    manifest = {"format": "native-v1", "config_paths": list(configs), "metadata": {"name": name}}
    (root / "nemo-environment.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    return root


def row_for(agent: str, text: str = "What is 2 + 2?", **extra: object) -> dict:
    """A dataset row for agent instance ``agent``."""
    return {
        "responses_create_params": {"input": [{"role": "user", "content": text}]},
        "agent_ref": {"type": "responses_api_agents", "name": agent},
        **extra,
    }


@contextlib.contextmanager
def running_up(
    pkg: Path, tmp: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 600
) -> Iterator[tuple[subprocess.Popen, dict]]:
    """``gym-runtime up PKG ARGS`` until its ready line; yields ``(process, ready info)``; SIGKILLs
    the daemon's whole session afterwards if it is still running."""
    proc = up_process(pkg, tmp, *args, env={"GYM_RUNTIME_HOME": str(tmp / "home"), **(env or {})})
    try:
        yield proc, json.loads(read_ready_line(proc, timeout=timeout))
    finally:
        kill_tree(proc)


def stop_cleanly(proc: subprocess.Popen, timeout: float = 30) -> tuple[int, str]:
    """SIGTERM the daemon; its exit code and stderr."""
    proc.terminate()
    code = proc.wait(timeout)
    return code, proc.stderr.read() if proc.stderr else ""


class StubEndpoint:
    """The stub model as an outside policy endpoint on a fixed loopback port, to kill and start again
    (a vLLM restarting during a weight refit). ``url`` is its ``/v1`` root."""

    def __init__(self, tmp: Path, model: str = "acme-policy-7b") -> None:
        self.tmp, self.model, self.port = tmp, model, free_port()
        self.running: Running | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        """Start it (its own session) and wait until it answers."""
        self.starts += 1
        argv = [
            sys.executable,
            "-m",
            "gym_runtime.stub_model",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--model",
            self.model,
        ]
        log = self.tmp / f"stub-{self.port}-{self.starts}.log"
        with log.open("wb") as sink:
            proc = subprocess.Popen(
                argv,
                cwd=REPO,
                env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO)},
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.running = Running(f"http://127.0.0.1:{self.port}", proc, log)
        wait_ready(self.running)

    def kill(self) -> None:
        """SIGKILL it (no goodbye to open connections) and reap it."""
        if self.running is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.running.proc.pid, signal.SIGKILL)
            self.running.proc.wait(10)
            self.running = None

    def __enter__(self) -> StubEndpoint:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
