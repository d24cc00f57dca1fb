"""Code shared by gym-runtime's built-in servers (``servers/*/*/app.py``); not a server itself.

Each built-in ``app.py`` puts ``servers/`` on ``sys.path`` (found relative to its own file, since
the daemon's ``PYTHONPATH`` is only the server directory) and imports this package. Modules:
``config`` (Gym's process contract: ``NEMO_GYM_CONFIG_DICT`` / ``NEMO_GYM_CONFIG_PATH``),
``server`` (FastAPI app skeleton, sessions, errors, uvicorn), ``peers`` (HTTP calls to other
instances), ``responses`` (Responses API <-> Chat Completions).
"""
