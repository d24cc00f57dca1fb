"""The head server: Gym's head endpoints plus health, logs and rollouts (docs/architecture.md §7)."""
