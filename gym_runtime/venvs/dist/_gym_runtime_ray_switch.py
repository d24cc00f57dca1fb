"""Installed by gym-runtime in every venv it builds: a NeMo Gym server the runtime runs without Ray.

NeMo Gym 0.7.0 gives every server whose class does not declare ``ray_enabled`` a Ray driver
(``nemo_gym/server_utils.py``: ``run_webserver`` asks ``_server_uses_ray(cls)``, which answers
True for an undeclared class). A server started with ``GYM_RUNTIME_NO_RAY_DRIVER=1`` in its
environment, which the runtime gives only to such a server whose tree imports no Ray, gets the
answer False instead, as if its class said ``ray_enabled = False``; a class that declares either
value keeps it. The variable is read when the server calls ``run_webserver``, so a server forked
from a parent that imported the SDK before the server's environment existed is told too.

``install()`` (the venv's ``_gym_runtime_ray_switch.pth``) puts a finder first on
``sys.meta_path`` that answers for ``nemo_gym.server_utils`` alone: the module is found and run
as usual, then ``_server_uses_ray`` is wrapped. Without that module or that function (another
release) nothing changes.
"""

import os
import sys

VAR = "GYM_RUNTIME_NO_RAY_DRIVER"
MODULE = "nemo_gym.server_utils"


def _wrap(module):
    decide = getattr(module, "_server_uses_ray", None)
    if decide is None or getattr(decide, "_gym_runtime", False):
        return

    def _server_uses_ray(server_class):
        if os.environ.get(VAR) == "1" and getattr(server_class, "ray_enabled", None) is None:
            return False
        return decide(server_class)

    _server_uses_ray._gym_runtime = True
    module._server_uses_ray = _server_uses_ray


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
