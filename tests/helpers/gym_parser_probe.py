"""Runs inside a venv with nemo-gym: NeMo Gym's own config parser on one job per stdin line.

Each line is ``{"id", "cwd", "config_paths", "values"}``; each answer, one JSON line on stdout:
``{"id", "config"}`` (the parsed config, resolved, as NeMo Gym's ``gym env resolve`` prints it,
secrets not hidden) or ``{"id", "error", "message"}``. ``GlobalConfigDictParser.parse`` is called
in-process with the command line and ``env.yaml`` skipped and ``offline`` set (0.6+: no port
probing); relative config paths resolve against ``cwd``, then the install root, as under Gym's CLI.
Used by :mod:`tests.helpers.gym_parser`; never imported by the test process itself.
"""

import json
import os
import sys

from nemo_gym.global_config import GlobalConfigDictParser, GlobalConfigDictParserConfig
from omegaconf import DictConfig, OmegaConf

out = sys.stdout
sys.stdout = sys.stderr  # Gym prints notes (duplicate config paths) on stdout in older releases
for line in sys.stdin:
    job = json.loads(line)
    os.chdir(job["cwd"])
    initial = DictConfig({"config_paths": job["config_paths"], **job.get("values", {})})
    try:
        parsed = GlobalConfigDictParser().parse(
            GlobalConfigDictParserConfig(
                initial_global_config_dict=initial, skip_load_from_cli=True, skip_load_from_dotenv=True, offline=True
            )
        )
        answer = {"id": job["id"], "config": OmegaConf.to_container(parsed, resolve=True)}
    except Exception as e:  # every failure is an answer: the test compares it with ours
        answer = {"id": job["id"], "error": type(e).__name__, "message": str(e)[:4000]}
    out.write(json.dumps(answer, default=str) + "\n")
    out.flush()
