"""Sandboxed server processes with an enforced egress allowlist (docs/architecture.md §6).

Stable API (the daemon calls exactly this)::

    from sandbox import (EgressPolicy, IsolationLevel, probe_isolation, Sandbox, ProcessSpec,
                         ResourceLimits, SandboxedProcess)

    policy = EgressPolicy.from_environ(os.environ, policy_endpoints=["http://127.0.0.1:8000/v1"])
    policy.decide(host, port, resolved=None) -> Decision(allowed, rule)
    policy.describe() -> dict                      # print at start, serve from the head server
    report = probe_isolation() -> IsolationReport(level, reasons, details)   # cached; .warning, .to_dict()

    sb = await Sandbox.start(policy, work_dir, require_full=False, level=None, resolver=None)
    sb.level, sb.report                             # chosen level and why (report.warning when < full)
    port = sb.allocate_port()                       # for a server inside the sandbox network
    proc = sb.spawn(ProcessSpec(name, argv, cwd, env, read_only_paths, writable_paths,
                                stdout_fd, stderr_fd, limits=ResourceLimits(memory_mb, pids, nofile),
                                private_env={"NEMO_GYM_CONFIG_DICT": ...}, tree=server_dir,
                                tree_root=package_root))
    lines = await sb.prepare(specs)                 # before the first spawns: progress lines to say
    host, hport = await sb.publish(port, host="127.0.0.1")   # address of 127.0.0.1:port inside, on host
    addr = await sb.expose_host_service(inside_port, host, port)  # e.g. the head server, inside
    sb.denials, sb.denial_count                     # [{server, host, port, rule, time}]
    await sb.close()

    proc.pid, proc.app_pid(), proc.poll(), proc.returncode, await proc.wait(),
    await proc.stop(grace_s) -> ExitInfo(returncode, reason, detail), proc.exit_info(), proc.memory_rss()

Task sandboxes, for code a server runs (docs/architecture.md §6, "Task sandboxes"; the daemon's
service is ``gym_runtime/task_sandboxes/``)::

    from sandbox.taskbox import TaskBox, BoxLimits, box_support     # BoxError, ExecOutcome
    from sandbox.boxroot import BoxRoot                              # BoxRoot.host(), an image's rootfs
    from sandbox.images import ImageStore                            # .resolve(image) -> BoxRoot
    from sandbox.joiner import JoinerFactory                         # one per daemon: forks joiners

    support = box_support(probe_isolation())                         # (bwrap, proc_mode), or why none
    box = await TaskBox.start(name, root, base_dir, BoxLimits(memory_mb, pids, cpus), policy, spawner,
                              *support, workdir=None, env=None, on_deny=None, resolver=None, factory=None)
    await box.exec(argv, env, cwd, timeout_s) -> ExecOutcome(returncode, stdout, stderr, timed_out,
                                                             truncated, error)
    await box.put(host_file, path); await box.get(path, host_file); await box.dial(port)
    box.alive, box.enforced, box.denials, box.processes(), box.over_limit(); await box.close()

``spawner`` is one long-lived thread (an executor) that forks every process of every box: a box's
processes die with that thread (``PR_SET_PDEATHSIG``), so it must outlive the boxes.

Rules for the caller:

* ``Sandbox.start`` and ``spawn`` run on the event-loop thread: PR_SET_PDEATHSIG follows the
  *thread* that forked, so a server spawned from a short-lived worker thread is killed when that
  thread ends. ``spawn`` is synchronous; the process is started when it returns.
* ``ProcessSpec.private_env`` (secrets) reaches the program alone: under bubblewrap through a pipe
  and a launcher run by ``argv[0]`` (then a Python interpreter), never bubblewrap's environment,
  which every process of the sandbox can read (``sandbox/launch.py``).
* ``ProcessSpec.env`` is the complete environment; the sandbox adds only ``HTTP(S)_PROXY`` /
  ``http(s)_proxy`` (a per-server proxy listener, so denials name the server) and
  ``NO_PROXY``/``no_proxy`` (localhost, 127.0.0.1, ::1, policy endpoint hosts and their aliases).
* Policy endpoints keep their original URLs: at full/partial each (host, port) is served by an
  in-namespace forward (a hostname is mapped to 127.0.1.N in the sandbox ``/etc/hosts``; an IP
  literal is added to the namespace's ``lo``). Under bubblewrap a server's host name is
  ``launch.SANDBOX_HOSTNAME``, mapped to 127.0.0.1 there too (without bubblewrap: the host's name).
  Servers talk to each other over 127.0.0.1 at ports
  from ``allocate_port()``. Give them the address ``expose_host_service`` returns for the head server.
* Exit: ``await proc.wait()`` (any number of waiters; then ``proc.exit_info()``); a crash is seen
  at once. Never watch the process by a pidfd of your own: the first watcher to reap it would
  leave the others waiting. A server over its memory limit is killed and its
  ``exit_info().reason`` is ``memory-limit`` (cgroup OOM or the psutil watcher).
* ``ExitInfo.reason``: ``exited``, ``signal``, ``terminated`` (our TERM), ``killed`` (KILL after the
  grace), ``memory-limit``, ``pids-limit``. uvicorn re-raises SIGTERM after a clean shutdown, so a
  terminated uvicorn reports returncode 143 with reason ``terminated``.
* Level none: ``allocate_port`` binds port 0 on the host and releases it (small race);
  ``publish`` is the identity; hostname policy endpoints go through the proxy (never local DNS).
  Level partial without bubblewrap: servers keep uid 0 mapped to the daemon's uid and can write
  wherever that uid can (the report says "no filesystem or pid isolation").
* Without bubblewrap (none, partial without it) a spec with ``tree`` runs from a private copy of
  that tree (``sandbox/treecopy.py``): its cwd, argv and env values naming the tree name the copy;
  a fresh copy per spawn (the one ``prepare`` made for the first), removed at the next spawn and
  at ``close``. Under bubblewrap ``tree`` is not used.
* Cost: ``Sandbox.start`` ~20-60 ms (the first call also probes, ~60 ms; the holder start blocks the
  loop ~20 ms); ``spawn`` adds ~10-20 ms per server at full; a keep-alive call through a forward
  costs the daemon 50-65 us of CPU on uvloop (the daemon's loop), 60-110 us on asyncio's (bench/egress.py;
  docs/performance-history.md, "Sandbox data path").
* Orphans: at full/partial every descendant of a server lives in the sandbox's pid namespace (or
  process group) and dies with it, also when the daemon is SIGKILLed. In a container the daemon
  runs under an init that reaps orphans (``tini``, docs/container.md); the sandbox never calls
  ``waitpid(-1)``, which would steal other children's exit codes.
* Errors: ``gym_runtime.errors.SettingsError`` (bad operator variables), ``IsolationError``
  (``require_full`` not satisfiable), ``StartError`` (spawn failed).
"""

from .core import Sandbox
from .launch import ProcessSpec
from .limits import ResourceLimits
from .policy import AllowEntry, Decision, EgressPolicy
from .probe import IsolationLevel, IsolationReport, probe_isolation
from .process import ExitInfo, SandboxedProcess

__all__ = [
    "AllowEntry",
    "Decision",
    "EgressPolicy",
    "ExitInfo",
    "IsolationLevel",
    "IsolationReport",
    "ProcessSpec",
    "ResourceLimits",
    "Sandbox",
    "SandboxedProcess",
    "probe_isolation",
]
