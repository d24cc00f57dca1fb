"""Environments: ``load_environment`` and a single-turn chat environment (verifiers 0.1.14 shapes)."""

from __future__ import annotations

import importlib
from typing import Any

from verifiers.rubrics import Rubric


def load_environment(env_id: str, **env_args: Any) -> "Environment":
    """Import the module named by ``env_id`` (``owner/tiny-math`` -> ``tiny_math``) and call its
    ``load_environment(**env_args)``; ``ValueError`` when it cannot be imported (as verifiers does)."""
    module_name = env_id.replace("-", "_").split("/")[-1]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"Could not import '{env_id}' environment. Ensure the package for the '{env_id}' "
                         "environment is installed.") from exc
    env = module.load_environment(**env_args)
    env.env_id = env.env_id or env_id
    env.env_args = env.env_args or dict(env_args)
    return env


def _field(message: Any, name: str) -> Any:
    value = getattr(message, name, None)
    extra = getattr(message, "model_extra", None) or {}
    return value if value is not None else extra.get(name)


class Environment:
    """Base environment: a dataset (list of ``{prompt, answer, ...}``), a rubric, a system prompt."""

    def __init__(self, dataset: list[dict] | None = None, rubric: Rubric | None = None,
                 system_prompt: str | None = None) -> None:
        self.dataset = dataset
        self.rubric = rubric or Rubric()
        self.system_prompt = system_prompt
        self.env_id: str | None = None
        self.env_args: dict | None = None

    def get_dataset(self, n: int = -1, seed: int | None = None) -> list[dict]:
        if self.dataset is None:
            raise ValueError("dataset is not set")
        return list(self.dataset if n < 0 else self.dataset[:n])

    async def rollout(self, item: dict, client: Any, model: str, sampling_args: dict) -> dict:
        raise NotImplementedError

    async def run_group(self, group_inputs: list[dict], client: Any, model: str, sampling_args: dict,
                        max_retries: int = 0, state_columns: list[str] | None = None, **_: Any) -> list[dict]:
        """One rollout per input, scored by the rubric."""
        outputs = []
        for item in group_inputs:
            out = await self.rollout(item, client, model, sampling_args)
            out["reward"], out["metrics"] = await self.rubric.score(out["completion"], item.get("answer", ""),
                                                                    info=item.get("info") or {})
            outputs.append(out)
        return outputs


class SingleTurnEnv(Environment):
    """One model call per rollout: system prompt + the input's prompt messages."""

    async def rollout(self, item: dict, client: Any, model: str, sampling_args: dict) -> dict:
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        messages += list(item["prompt"])
        reply = await client.chat.completions.create(model=model, messages=messages, **sampling_args)
        message = reply.choices[0].message
        completion = [{"role": "assistant", "content": message.content or ""}]
        tokens = None
        if _field(message, "generation_token_ids") is not None:
            tokens = {"prompt_ids": _field(message, "prompt_token_ids") or [],
                      "completion_ids": _field(message, "generation_token_ids") or [],
                      "completion_logprobs": _field(message, "generation_log_probs") or []}
        return {"prompt": messages, "completion": completion, "example_id": item.get("example_id"),
                "trajectory": [{"prompt": messages, "completion": completion, "tokens": tokens}]}
