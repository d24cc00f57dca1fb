"""The config keys of the built-in ``vllm_model`` (docs/rollouts.md, "The model server's surface").

One pydantic model, :class:`VLLMModelConfig`, that forbids unknown keys: the server validates its
block with it at start, and ``gym-runtime validate``/``config``/``up`` check every instance of the
built-in implementation against it before anything starts (``gym_runtime/config/builtin_keys.py``,
``GR-CONFIG-UNKNOWN-KEY``). It knows every key of NeMo Gym 0.7.0's ``VLLMModelConfig``
(``responses_api_models/vllm_model/app.py`` and its bases in ``nemo_gym/config_types.py``,
``nemo_gym/base_responses_api_model.py``); the few it does not serve are in :data:`REFUSED` with
the reason (``GR-CONFIG-UNSUPPORTED-KEY``), so a key is never silently ignored.

This module imports pydantic only: the runtime loads it from the file, outside the server's venv.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# key -> why the built-in server does not serve it (set to anything but its default)
REFUSED = {
    "supply_prefix_token_ids": "it needs the required_prefix_token_ids extension, which stock vLLM does not have",
    "endpoint_file": "the policy endpoints are the job's --policy-base-url values (a file outside the package "
    "is not readable in the server's sandbox)",
    "audio_root": "audio rows (metadata.audio_path) are not served by the built-in vllm_model",
    "tokenizer": "render_chat_template renders with the endpoint's own chat template (vLLM's /tokenize), so "
    "there is no client-side tokenizer to name",
}
# what each refused key's default is (setting a refused key to its default is allowed)
REFUSED_DEFAULTS: dict[str, Any] = {
    "supply_prefix_token_ids": False,
    "endpoint_file": None,
    "audio_root": None,
    "tokenizer": None,
}


class NonGeneratingRequest(BaseModel):
    """One entry of ``token_id_capture_non_generating_requests`` (NeMo Gym 0.7.0)."""

    model_config = ConfigDict(extra="forbid")
    method: str
    path: str


class VLLMModelConfig(BaseModel):
    """The instance block of a built-in ``vllm_model`` (keys and defaults: docs/rollouts.md)."""

    model_config = ConfigDict(extra="forbid")

    # every server's keys (NeMo Gym's BaseRunServerInstanceConfig); the runtime assigns host and port
    entrypoint: str = "app.py"
    host: str | None = None
    port: int | None = None
    name: str | None = None
    num_workers: int | None = None
    domain: str | None = None
    datasets: Any = None
    # the runtime's own keys of any instance (docs/scale-out.md, docs/runtime.md "Venvs")
    placement: Any = None
    python_version: Any = None

    base_url: list[str]
    api_key: str = "EMPTY"
    model: str
    return_token_id_information: bool = False
    request_prompt_and_generation_token_ids: bool = False
    uses_reasoning_parser: bool = False
    uses_interleaved_reasoning: bool = True
    reasoning_field: Literal["both", "reasoning", "reasoning_content"] = "both"
    preserve_reasoning_in_assistant_content: bool = False
    replace_developer_role_with_system: bool = False
    sequential_reasoning_allowed: bool = True
    is_responses_native: bool = False
    use_completions_api: bool = False
    render_chat_template: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    forward_request_chat_template_kwargs: bool = False
    continue_final_assistant_message: bool = False
    sampling_overrides: dict[str, Any] | None = None
    extra_body: dict[str, Any] | None = None
    default_headers: dict[str, str] = Field(default_factory=dict)
    forward_session_id_as_conversation_id: bool = False
    propagate_context_overflow_errors: bool = False
    token_id_capture_non_generating_requests: list[NonGeneratingRequest] = Field(default_factory=list)
    request_timeout_seconds: float | None = None
    retry_deadline_seconds: float = Field(600.0, ge=0)
    # NeMo Gym 0.7.0 keys of the endpoint-file rotation (refused with endpoint_file; kept so that a
    # config that sets them with no endpoint_file still validates)
    endpoint_stale_grace_s: float = 300.0
    endpoint_connection_retries: int | None = 8
    endpoint_check_interval_s: float = 10.0
    supply_prefix_token_ids: bool = False
    endpoint_file: str | None = None
    audio_root: str | None = None
    tokenizer: str | None = None

    @field_validator("base_url", mode="before")
    @classmethod
    def _as_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _combinations(self) -> VLLMModelConfig:
        for key, default in REFUSED_DEFAULTS.items():
            if getattr(self, key) != default:
                raise ValueError(f"{key} is not supported by the built-in vllm_model: {REFUSED[key]}")
        if self.is_responses_native and (self.return_token_id_information or self.use_completions_api):
            raise ValueError(
                "is_responses_native cannot be combined with return_token_id_information or "
                "use_completions_api (the upstream /responses answer carries no token ids)"
            )
        if self.render_chat_template and not self.use_completions_api:
            raise ValueError("render_chat_template is only read with use_completions_api: true")
        return self


SCHEMA = VLLMModelConfig
