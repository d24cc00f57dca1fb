"""Where server instances run: this host, or nodes of a Ray cluster (docs/scale-out.md).

* :mod:`~gym_runtime.placement.cluster`: the daemon as the Ray driver owning every replica actor;
* :mod:`~gym_runtime.placement.replica`: the actor on a node (package, venv, sandbox, server);
* :mod:`~gym_runtime.placement.remote`: the driver side of one replica (launcher and handle the
  supervisor drives like a local process);
* :mod:`~gym_runtime.placement.package`: the package on a node, in place or shipped and verified;
* :mod:`~gym_runtime.placement.addresses`: the stable addresses on the daemon's node.
"""
