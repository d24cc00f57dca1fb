"""Rollouts: dataset rows, dispatch to agents, group statistics and the dry-run report (docs/architecture.md §9)."""
