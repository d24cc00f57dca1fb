"""Host mode: ``gym-runtime up PKG --host-mode nmp``, the job-level sandboxed Gym host NMP starts
(docs/runtime.md, "Host mode"): the Gym global config from the environment
(:mod:`.global_config`), the head server bound at once in a port range and answering ``/health``
from the first moment (:mod:`.mode`), and ``POST /rollouts/run`` answers joined on ``_rowidx``
(:mod:`.rows`)."""

HOST_MODES = ("nmp",)
ROLLOUT_DEADLINE_S = 1800.0  # a host-mode batch's deadline unless --rollout-deadline or the request says
