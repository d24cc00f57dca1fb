"""One shared chain of real server processes on loopback for the server contract tests.

Two stub replicas (``--max-model-len 2048``), ``policy_model`` (our vllm_model over both, token
ids and reasoning parser on), ``policy_plain`` (one replica, no token ids), ``policy_down`` (an
endpoint nobody listens on), the two example resources servers and simple agents over them.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import pytest

from tests.helpers.gym_servers import GymConfig, Running, free_port, start_server, start_stub

TOOLS = [
    {
        "type": "function",
        "name": "get_code",
        "description": "Secret code of a key",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"key": {"type": "string"}},
            "required": ["key"],
            "additionalProperties": False,
        },
    }
]


def lookup_row(key: str = "alpha", extra: str = "") -> dict:
    """A dataset row for the code-lookup environment."""
    return {
        "responses_create_params": {
            "input": [{"role": "user", "content": f"What is the secret code for '{key}'? {extra}"}],
            "tools": TOOLS,
        },
        "key": key,
    }


def arithmetic_row(question: str = "What is 12 + 7 * 3?", answer: str | None = None) -> dict:
    """A dataset row for the arithmetic environment."""
    row = {"responses_create_params": {"input": [{"role": "user", "content": question}]}}
    if answer is not None:
        row["answer"] = answer
    return row


@dataclass
class Chain:
    """URLs of the running chain, by instance name."""

    urls: dict[str, str]
    stubs: list[Running]
    config: GymConfig

    def __getitem__(self, name: str) -> str:
        return self.urls[name]


def _agent(cfg: GymConfig, name: str, resources: str, model: str = "policy_model", **settings) -> None:
    cfg.add(
        name,
        "responses_api_agents",
        "simple_agent",
        resources_server={"type": "resources_servers", "name": resources},
        model_server={"type": "responses_api_models", "name": model},
        **settings,
    )


@pytest.fixture(scope="session")
def chain(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("chain")
    with contextlib.ExitStack() as stack:
        stubs = [stack.enter_context(start_stub(tmp, "--seed", "7", "--max-model-len", "2048")) for _ in range(2)]
        cfg = GymConfig()
        cfg.extra = {
            "policy_base_url": [s.url + "/v1" for s in stubs],
            "policy_api_key": "EMPTY",
            "policy_model_name": "stub-model",
        }
        common = {"api_key": "${policy_api_key}", "model": "${policy_model_name}"}
        cfg.add(
            "policy_model",
            "responses_api_models",
            "vllm_model",
            base_url="${policy_base_url}",
            return_token_id_information=True,
            uses_reasoning_parser=True,
            **common,
        )
        cfg.add(
            "policy_plain",
            "responses_api_models",
            "vllm_model",
            base_url=stubs[0].url + "/v1",
            return_token_id_information=False,
            uses_reasoning_parser=False,
            **common,
        )
        cfg.add(
            "policy_down",
            "responses_api_models",
            "vllm_model",
            base_url=f"http://127.0.0.1:{free_port()}/v1",
            return_token_id_information=False,
            uses_reasoning_parser=False,
            retry_deadline_seconds=1,
            **common,
        )
        cfg.add("lookup", "resources_servers", "example_code_lookup", domain="agent", salt="tests")
        cfg.add("arithmetic", "resources_servers", "example_arithmetic", domain="math")
        cfg.add("lookup_gone", "resources_servers", "example_code_lookup", domain="agent")
        _agent(cfg, "lookup_agent", "lookup", max_steps=4)
        _agent(cfg, "arithmetic_agent", "arithmetic", model="policy_plain")
        _agent(cfg, "one_step_agent", "lookup", max_steps=1)
        _agent(cfg, "down_model_agent", "lookup", model="policy_down")
        _agent(cfg, "gone_resources_agent", "lookup_gone", connect_retry_seconds=1)
        urls = {}
        for name in cfg.instances:
            if name == "lookup_gone":
                urls[name] = (
                    f"http://127.0.0.1:{cfg.instances[name]['resources_servers']['example_code_lookup']['port']}"
                )
                continue
            urls[name] = stack.enter_context(start_server(cfg, name, tmp)).url
        yield Chain(urls, stubs, cfg)
