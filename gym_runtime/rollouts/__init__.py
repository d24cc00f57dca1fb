"""Rollouts: dataset rows, dispatch to agents, group statistics and the dry-run report (docs/architecture.md §9)."""

# Seconds one dry-run rollout may take unless --rollout-timeout says otherwise: longer than the model
# server's default retry deadline (600 s), so a policy endpoint that stays away is named as such.
ROLLOUT_TIMEOUT_S = 900.0
