"""Sub-commands of the gym-runtime CLI (one module each)."""
