"""Everything about Ray, in one room (docs/runtime.md, "Ray").

* which servers use Ray, decided before anything is built (``use``; a server tree's Ray imports, read
  without running it: ``imports``) and the servers NeMo Gym would give a driver but run without one
  (``switch``, installed into their venvs from ``dist/``);
* the cluster the servers use: joined (``target``: the address and how far isolation can go) or a
  private head the daemon starts and stops (``head``, its holder script ``hold/``), or one each
  server starts for itself in its sandbox (``own``);
* each server's Ray environment (``env``; its tasks run as a Ray job in its own venv: ``workers``);
* ``dry-run --watch`` edits that would change a server's Ray use (``watch``).

Inside this package ``import ray`` still names Ray itself (absolute imports).
"""
