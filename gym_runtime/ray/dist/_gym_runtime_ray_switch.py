"""Installed by gym-runtime in every venv it builds: a NeMo Gym server the runtime runs without Ray.

NeMo Gym 0.7.0 gives every server whose class does not declare ``ray_enabled`` a Ray driver
(``nemo_gym/server_utils.py``: ``run_webserver`` asks ``_server_uses_ray(cls)``, which answers
True for an undeclared class). A server started with ``GYM_RUNTIME_NO_RAY_DRIVER=1`` in its
environment, which the runtime gives only to such a server whose tree imports no Ray, gets the
answer False instead, as if its class said ``ray_enabled = False``; a class that declares False
keeps it. A class that turns out to declare True (a value the runtime could not read without
running the code) stops the server with a ``RuntimeError`` saying what to do, rather than let the
SDK start a Ray cluster of its own in the server's sandbox. The variable is read when the server
calls ``run_webserver``, so a server forked from a parent that imported the SDK before the
server's environment existed is told too.

``install()`` (the venv's ``_gym_runtime_ray_switch.pth``) puts a finder first on
``sys.meta_path`` that answers for ``nemo_gym.server_utils`` alone: the module is found and run
as usual, then ``_server_uses_ray`` is wrapped. A release without that function but with
``initialize_ray`` gets the same stop there; without either nothing changes.
"""

import os
import sys

VAR = "GYM_RUNTIME_NO_RAY_DRIVER"
MODULE = "nemo_gym.server_utils"


FIX = ("declare `ray_enabled = True` (a literal) on the class in the server's tree, or set "
       "GYM_RUNTIME_RAY_UNDECLARED=always for the daemon")


def _told():
    return os.environ.get(VAR) == "1"


def _wrap(module):
    decide = getattr(module, "_server_uses_ray", None)
    if decide is None:
        _guard(module)
        return
    if getattr(decide, "_gym_runtime", False):
        return

    def _server_uses_ray(server_class):
        if _told():
            value = getattr(server_class, "ray_enabled", None)
            if value is None:
                return False
            if value:
                raise RuntimeError(f"gym-runtime runs this server without Ray, but its class "
                                   f"{server_class.__name__} declares ray_enabled = {value!r} when it runs: {FIX}")
        return decide(server_class)

    _server_uses_ray._gym_runtime = True
    module._server_uses_ray = _server_uses_ray


def _guard(module):
    """A release without ``_server_uses_ray``: a server told to run without Ray that starts one stops."""
    start = getattr(module, "initialize_ray", None)
    if start is None or getattr(start, "_gym_runtime", False):
        return

    def initialize_ray(*args, **kwargs):
        if _told():
            raise RuntimeError("gym-runtime runs this server without Ray, but this NeMo Gym release starts "
                               f"one for it: {FIX}")
        return start(*args, **kwargs)

    initialize_ray._gym_runtime = True
    module.initialize_ray = initialize_ray


class _Loader:
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _wrap(module)

    def __getattr__(self, name):  # get_source, get_code, ... as the wrapped loader answers them
        return getattr(self._loader, name)


class _Finder:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != MODULE:
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _Loader(spec.loader)
        return spec

    @staticmethod
    def invalidate_caches():
        pass


def install():
    """Put the finder first on ``sys.meta_path`` (once); wrap the module at once if it is loaded."""
    if any(f is _Finder for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _Finder)
    if MODULE in sys.modules:
        _wrap(sys.modules[MODULE])
