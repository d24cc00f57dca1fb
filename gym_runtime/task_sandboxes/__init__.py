"""Task sandboxes: the daemon's service behind NeMo Gym's Sandbox API (docs/runtime.md, "Task sandboxes").

* :mod:`.service`: boxes by owner, lifetime, access (the mechanism is :mod:`sandbox.taskbox`);
* :mod:`.api`: the HTTP API the ``gym_runtime`` provider speaks; :mod:`.install`: that provider's
  distribution in every server venv (its source: ``dist/gym_runtime_sandbox.py``);
* :mod:`.offer`: which provider a config gets on this host; :mod:`.settings`, :mod:`.spec`;
* with an OpenSandbox server configured: :mod:`.osb_gate` (the daemon's gate to it for Gym's own
  ``opensandbox`` provider), :mod:`.osb_requests` (what a server may ask it for) and
  :mod:`.approval` (the images task sandboxes there may run).
"""
