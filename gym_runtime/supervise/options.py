"""Supervision settings for one run (deadlines, restarts, shutdown grace): a value object passed down.

Defaults are documented here and in ``gym-runtime up --help``; every one can be set with a flag
(``--ready-timeout`` ...) or through :class:`gym_runtime.Runtime`'s keyword arguments.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SuperviseOptions:
    """How the supervisor waits, restarts and stops (all times in seconds).

    * ``server_ready_timeout_s``: per server, from its (re)start until ``GET /`` answers (default 180).
    * ``startup_timeout_s``: the whole start-up, spawn to all ready, including model endpoints (600).
    * ``model_endpoint_timeout_s``: policy endpoints' ``/models`` probe deadline; ``0`` skips it (600).
    * ``max_restarts``: restarts per server after an unrequested exit before the environment fails (3);
      a restart after the server's node was lost (placement ray) is not counted.
    * ``backoff_s`` / ``backoff_max_s``: first restart delay, doubled each time up to the max (0.5 / 8).
    * ``shutdown_grace_s``: TERM -> wait -> KILL of each process group (case C05; default 5).
    * ``keep_going``: when a server fails for good, keep the others up instead of exiting non-zero.
    * ``after_fix``: what a failure's hint says to do once the server is fixed ("then start again";
      ``dry-run --watch``, which starts it again at the next edit, says so).
    * ``log_tail_lines``: lines kept in memory per server and shown in failure reports (40).
    * ``log_max_bytes``: a server log file is rotated (one ``.1`` backup) past this size (50 MB).
    * ``probe_policy``: before ready, probe each policy endpoint with a two-turn conversation that
      offers a tool (and asks for token ids where the instance does) and check tools, token ids,
      ``uses_reasoning_parser`` and ``reasoning_field`` against what it returns (policy/probe.py;
      off by default). Without it, one turn is still probed for an instance with
      ``return_token_id_information``, and with a tool when ``probe_tools`` (the dry-run sets it
      when its rows offer tools), unless ``model_endpoint_timeout_s`` is 0.
    * ``liveness_interval_s`` / ``liveness_timeout_s`` / ``liveness_misses``: after ready, every
      server is sent ``GET /`` every interval with that deadline; that many misses in a row mean it
      is wedged (its port is open but it does not answer): it is named in ``status`` and
      ``/health`` and restarted like a server that exited (5 / 10 / 3; an interval of 0 turns the
      probe off; supervisor.py).
    """

    server_ready_timeout_s: float = 180.0
    startup_timeout_s: float = 600.0
    model_endpoint_timeout_s: float = 600.0
    max_restarts: int = 3
    backoff_s: float = 0.5
    backoff_max_s: float = 8.0
    shutdown_grace_s: float = 5.0
    keep_going: bool = False
    after_fix: str = "then start again"
    log_tail_lines: int = 40
    log_max_bytes: int = 50 * 1024 * 1024
    probe_policy: bool = False
    probe_tools: bool = False
    liveness_interval_s: float = 5.0
    liveness_timeout_s: float = 10.0
    liveness_misses: int = 3

    def backoff(self, restarts_done: int) -> float:
        """Delay before restart number ``restarts_done + 1``: ``backoff_s * 2**n`` capped at the max."""
        return min(self.backoff_s * (2**restarts_done), self.backoff_max_s)
