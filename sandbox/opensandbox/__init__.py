"""The ``opensandbox`` sandbox backend: servers in sandboxes of the operator's OpenSandbox server
(docs/runtime.md, "Sandbox backends"). ``connection`` (how to reach it), ``spec`` (what each
sandbox is asked for, pure), ``failures`` (its errors as ours), ``service`` (the server: version, a run's
sandboxes by label), ``execd`` (the command API of the agent in each sandbox, checked once per run),
``environment`` / ``process`` (servers in sandboxes), ``relay`` / ``forwarder`` (the network between them)."""

NO_SERVER = "x-gym-runtime-no-server"  # header of an answer the relay or execd gave in the server's stead (relay.py)
