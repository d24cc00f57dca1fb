"""An OpenAI-compatible stub of a vLLM server for local runs and tests (docs/architecture.md §8).

``create_app(seed, model, ...)`` builds the FastAPI app; ``python -m gym_runtime.stub_model
--host H --port P [--seed S] [--model NAME]`` serves it. See :mod:`gym_runtime.stub_model.app`
for the endpoints and :mod:`gym_runtime.stub_model.policy` for what it answers.
"""

from gym_runtime.stub_model.app import StubSettings, create_app

__all__ = ["StubSettings", "create_app"]
