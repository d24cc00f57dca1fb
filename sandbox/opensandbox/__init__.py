"""The ``opensandbox`` sandbox backend: servers in sandboxes of the operator's OpenSandbox server
(docs/runtime.md, "Sandbox backends"). ``connection`` (how to reach it), ``spec`` (what each
sandbox is asked for, pure), ``failures`` (its errors as ours), ``reap`` (a run's sandboxes by label)."""
