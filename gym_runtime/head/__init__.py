"""The head server: Gym's head endpoints plus health, logs and rollouts (DESIGN.md §7)."""
