"""The policy endpoint ``policy_model`` uses (docs/rollouts.md, "The policy endpoint is checked for what it is").

* ``values``: the job's policy values at ``up`` (base URL, key, model name; the built-in stub model
  when none is given) and the config built with them;
* ``endpoint``: what the endpoint must answer to count as ready (an OpenAI API root listing the
  policy model);
* ``probe``: the start-up probe of what the endpoint does (reasoning and tool parsers, token ids).
"""
