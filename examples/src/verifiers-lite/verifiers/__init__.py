"""A minimal stand-in for Prime Intellect's ``verifiers`` 0.1.14, for gym-runtime's adapter example.

It implements only what Gym's ``verifiers_agent`` uses (verifiers v0.1.14; NeMo Gym's
``responses_api_agents/verifiers_agent/app.py``):
``load_environment(env_id, **env_args)``, ``Environment.get_dataset`` and ``await
Environment.run_group(group_inputs, client, model, sampling_args, max_retries=0, state_columns=None)``
returning one output per input with ``completion``, ``reward``, ``metrics`` and
``trajectory[].tokens``. The real package needs ``datasets``, ``anthropic``, ``mcp`` and more;
replace this wheel by the real closure (``gym-runtime vendor``) for a real environment.
"""

from verifiers.envs import Environment, SingleTurnEnv, load_environment
from verifiers.rubrics import Rubric

__all__ = ["Environment", "Rubric", "SingleTurnEnv", "load_environment"]
__version__ = "0.1.14+lite"
