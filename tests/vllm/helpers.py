"""What the ``vllm`` tests share: runs of ``up`` and ``dry-run`` against an engine, and vLLM's own
answers to compare with (``tests/vllm/conftest.py`` starts the engines)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.helpers.environments import shared_venvs
from tests.helpers.vllm_engine import VLLMServer

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "native-quickstart"
POLICY = "policy_model.responses_api_models.vllm_model"
TOOL = {
    "type": "function",
    "name": "get_code",
    "description": "Look up the secret code of a key.",
    "parameters": {
        "type": "object",
        "properties": {"key": {"type": "string"}},
        "required": ["key"],
        "additionalProperties": False,
    },
    "strict": True,
}


def policy_args(engine: VLLMServer) -> list[str]:
    return ["--policy-base-url", engine.base_url, "--policy-model-name", engine.model]


def runtime_env(tmp: Path) -> dict[str, str]:
    """The built-in servers' shared venvs (the bundled example runs under the default pins: its
    environment servers are the built-in relays, which need no SDK)."""
    return {**shared_venvs(), "GYM_RUNTIME_POLICY_API_KEY": "EMPTY", "GYM_RUNTIME_HOME": str(tmp / "home")}


def probe_refused(engine: VLLMServer, tmp: Path) -> str:
    """Run ``up --probe-policy`` on the bundled example against ``engine``; assert it refused the
    policy endpoint (exit 3, no ready line) and return its stderr."""
    from tests.helpers.daemon import kill_tree, up_process

    proc = up_process(QUICKSTART, tmp, *policy_args(engine), "--probe-policy", env=runtime_env(tmp))
    try:
        out, err = proc.communicate(timeout=900)
    finally:
        kill_tree(proc)
    assert proc.returncode == 3 and out == "", err[-3000:]
    return err


def rows_file(tmp: Path, rows: list[dict]) -> Path:
    path = tmp / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def row(agent: str, text: str, tools: bool = False, **params: object) -> dict:
    """A dataset row for ``agent`` (greedy decoding: the tiny model's trained answers)."""
    create = {"input": [{"role": "user", "content": text}], "temperature": 0, **params}
    if tools:
        create["tools"] = [TOOL]
    return {"responses_create_params": create, "agent_ref": {"type": "responses_api_agents", "name": agent}}


def vllm_chat(engine: VLLMServer, body: dict) -> dict:
    """vLLM's own chat completion for ``body``, with its token ids (``token_id:<int>`` logprobs)."""
    reply = httpx.post(
        engine.base_url + "/chat/completions",
        json={"model": engine.model, **body, "logprobs": True, "top_logprobs": 0, "return_tokens_as_token_ids": True},
        timeout=120,
        trust_env=False,
    )
    reply.raise_for_status()
    return reply.json()


def vllm_tokenize(engine: VLLMServer, body: dict) -> list[int]:
    """vLLM's own ``/tokenize`` of a chat request (its chat template, add_generation_prompt)."""
    keep = {k: body[k] for k in ("messages", "tools", "chat_template_kwargs") if k in body}
    reply = httpx.post(engine.root + "/tokenize", json={"model": engine.model, **keep}, timeout=60, trust_env=False)
    reply.raise_for_status()
    return reply.json()["tokens"]


def logprob_ids(completion: dict) -> list[int]:
    return [int(e["token"].removeprefix("token_id:")) for e in completion["choices"][0]["logprobs"]["content"]]


def token_item(response: dict) -> dict:
    """The output item carrying the token ids (the last one)."""
    (item,) = [i for i in response["output"] if "generation_token_ids" in i]
    return item
