"""Rollouts: dataset rows, dispatch to agents, group statistics and the dry-run report (DESIGN.md §9)."""
