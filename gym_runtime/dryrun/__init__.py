"""The dry-run: rows run through a started environment and reported (:mod:`.run`), and
``dry-run --watch``: edits seen (:mod:`.edits`, :mod:`.watch_limits`), venvs rebuilt
(:mod:`.rebuild`) and the rows run again (:mod:`.watch`). It starts environments through
:mod:`gym_runtime.runtime` and so sits above it (docs/architecture.md §2, "Layers").
"""
