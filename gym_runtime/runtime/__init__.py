"""Bring-up of one environment: every stage of ``up`` and ``dry-run`` in order (:mod:`.bringup`),
the Python API over it (:class:`.api.Runtime`), and a running environment's config merged again
after an edit (:mod:`.reload`). This room sits above the head server, the host mode, rollouts and
the placement it drives (docs/architecture.md §2, "Layers").
"""
