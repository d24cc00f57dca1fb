"""What the daemon inherits from whoever started it, made into what it relies on (cases C66, C68, C69).

A process gets more than its argv and environment from its launcher: the standard descriptors,
signal dispositions and the blocked-signal mask (both survive ``fork`` + ``execve``, POSIX
``execve(2)``; Linux keeps an ignored SIGCHLD), a uid that may have no passwd entry and a HOME that
may be unset or unwritable (OpenShift-style pods), and resource limits. :func:`normalise`, called
once at the start of ``up``, ``dry-run``, ``build`` and the drop-in's ``RunHelper.start``, turns each into what
the daemon needs, and returns one line per change (said on stderr, never silent):

* descriptors 0, 1, 2: a closed one gets ``/dev/null`` (else the first file the daemon opens would
  become its stdout) -- :func:`standard_descriptors`, which the CLI also calls first for every command;
* signals: the mask is cleared (a blocked SIGTERM made every stop a SIGKILL after the grace),
  SIGTERM and SIGCHLD get their default action (an ignored SIGCHLD auto-reaps children, so
  ``waitpid`` fails with ECHILD and every ``subprocess.run`` waits out its timeout), SIGINT Python's
  KeyboardInterrupt. SIGHUP is a stop request like SIGTERM (:func:`stop_signals`), except when it
  came in *ignored* (``nohup``, a launcher that wants the daemon to outlive its terminal): then it
  stays ignored, and the note says so. In the drop-in (a trainer's process, whose handlers are
  its own) only an ignored SIGCHLD is changed, and only from the main thread; elsewhere it is
  :data:`CODE_SIGNALS`. Servers get a clean state whatever the daemon's (``sandbox.launch``);
* HOME: an unset or unwritable HOME (and no passwd entry to fall back on) becomes the state root
  ``GYM_RUNTIME_HOME`` when that is set and writable, so the uv cache and every other path derived
  from HOME land under it; without one it is :data:`CODE_HOME`. A uid with no passwd entry and no
  ``USER``/``LOGNAME`` gets ``USER`` set to its number (``getpass.getuser()`` raises otherwise), which
  servers get too (``gym_runtime/supervise/contract.py``);
* RLIMIT_NOFILE: the soft limit is raised to the hard one; :func:`check_open_files` compares it
  with what the environment's servers will need (:data:`FDS_PER_SERVER`) once their number is known.

Errors: :class:`~gym_runtime.errors.SettingsError` (exit 1) with :data:`CODE_HOME`,
:data:`CODE_NOFILE` or :data:`CODE_SIGNALS` (docs/architecture.md's error table).
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import threading
from collections.abc import MutableMapping

from gym_runtime.errors import SettingsError

CODE_HOME = "GR-INHERITED-HOME"
CODE_NOFILE = "GR-INHERITED-NOFILE"
CODE_SIGNALS = "GR-INHERITED-SIGNALS"

# Descriptors the daemon holds per server instance while rollouts run: its log pipes, pidfds, the
# sandbox's forwards (two per connection in flight), the head server's and the rollouts' client
# pools. Measured (bench/daemon_fds.py): peaks of 336 to 427 in the daemon for the bundled example's
# 8 server processes during a dry-run of 96 rollouts at 32 in flight per agent (about 96 at ready),
# so 42 to 53 per server, with a margin; BASE_FDS covers the daemon's own (loop, holder, proxy, logs).
FDS_PER_SERVER = 64
BASE_FDS = 64


def standard_descriptors() -> list[str]:
    """Open ``/dev/null`` on each of descriptors 0, 1, 2 that is closed, and give Python a stream
    for it; returns a note per descriptor opened. Idempotent."""
    notes = []
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        if getattr(sys, name) is None:
            mode = "r" if fd == 0 else "w"
            setattr(sys, name, open(fd, mode, buffering=1 if fd else -1, closefd=False))
        notes.append(name)
    return [f"{', '.join(notes)} came closed: /dev/null in its place"] if notes else []


def stop_signals() -> tuple[signal.Signals, ...]:
    """The signals that stop ``up`` and ``dry-run``: SIGTERM, SIGINT and SIGHUP (the terminal went
    away), but not SIGHUP when it is ignored (it came in ignored: ``nohup``; module doc)."""
    hup = () if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN else (signal.SIGHUP,)
    return (signal.SIGTERM, signal.SIGINT, *hup)


def _name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


def _signals(process_wide: bool) -> list[str]:
    notes = []
    main = threading.current_thread() is threading.main_thread()
    if process_wide:
        blocked = signal.pthread_sigmask(signal.SIG_SETMASK, [])
        if blocked:
            notes.append(f"blocked signals ({', '.join(sorted(map(_name, blocked)))}) unblocked")
    ignored = [s for s in (signal.SIGTERM, signal.SIGCHLD, signal.SIGINT) if signal.getsignal(s) == signal.SIG_IGN]
    if not process_wide:
        ignored = [s for s in ignored if s == signal.SIGCHLD]
        if ignored and not main:
            raise SettingsError(
                "SIGCHLD is ignored in this process (inherited from its launcher): the kernel then "
                "reaps children by itself and the runtime cannot see its servers exit",
                code=CODE_SIGNALS,
                hint="call RunHelper.start from the main thread (it resets SIGCHLD), or have the "
                "launcher leave SIGCHLD at its default (signal.signal(signal.SIGCHLD, signal.SIG_DFL))",
            )
    for s in ignored:
        signal.signal(s, signal.default_int_handler if s == signal.SIGINT else signal.SIG_DFL)
    if ignored:
        notes.append(f"ignored signals ({', '.join(s.name for s in ignored)}) set back to their default")
    if process_wide and signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
        notes.append(
            "SIGHUP came in ignored (nohup): a hangup of its terminal does not end this command; SIGTERM or SIGINT do"
        )
    return notes


def _writable_dir(path: str | None) -> bool:
    return path is not None and os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)


def _home(environ: MutableMapping[str, str]) -> list[str]:
    notes = []
    uid = os.getuid()
    try:
        import pwd

        entry: str | None = pwd.getpwuid(uid).pw_dir
    except KeyError:
        entry = None
    if entry is None and not (environ.get("USER") or environ.get("LOGNAME")):
        environ["USER"] = str(uid)
        notes.append(f"uid {uid} has no passwd entry and no USER: USER={uid}")
    home = environ.get("HOME")
    if _writable_dir(home):
        return notes
    if not home and _writable_dir(entry):
        environ["HOME"] = str(entry)
        return [*notes, f"HOME was unset: {entry} (uid {uid}'s passwd entry)"]
    why = (
        f"HOME={home} is not a writable directory"
        if home
        else "HOME is unset" + ("" if entry else f" and uid {uid} has no passwd entry")
    )
    state = environ.get("GYM_RUNTIME_HOME")
    if state:
        try:
            os.makedirs(state, exist_ok=True)
        except OSError:
            pass
    if state is None or not _writable_dir(state):
        raise SettingsError(
            f"{why}: the state root (~/.cache/gym-runtime) and the uv cache cannot be derived from it"
            + (f", and GYM_RUNTIME_HOME={state} is not a writable directory" if state else ""),
            code=CODE_HOME,
            hint="set GYM_RUNTIME_HOME to a writable directory (the uv cache then goes under it unless "
            "GYM_RUNTIME_UV_CACHE_DIR or UV_CACHE_DIR is set), or HOME to a writable one",
        )
    environ["HOME"] = os.path.abspath(state)
    return [*notes, f"{why}: HOME={environ['HOME']} (the state root, GYM_RUNTIME_HOME) for what derives from it"]


def _open_files() -> list[str]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            with open("/proc/sys/fs/nr_open") as f:
                target = int(f.read())
        except (OSError, ValueError):
            target = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError):
            return []
        return [f"open-file limit raised from {soft} to {target} (its hard limit)"]
    return []


def normalise(environ: MutableMapping[str, str] | None = None, *, process_wide: bool = True) -> list[str]:
    """Make the inherited state what the daemon relies on (module doc); returns a note per change.
    ``process_wide`` False (the drop-in inside a trainer's process) leaves the caller's signal
    handlers and mask alone. ``environ`` (default ``os.environ``) gets HOME and USER when needed.
    Raises :class:`SettingsError` :data:`CODE_HOME` or :data:`CODE_SIGNALS`."""
    env = os.environ if environ is None else environ
    return [*standard_descriptors(), *_signals(process_wide), *_home(env), *_open_files()]


def clear_thread_mask() -> None:
    """Unblock every signal in the calling thread (the drop-in's own loop thread, whose threads and
    children inherit its mask)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def check_open_files(servers: int) -> None:
    """Refuse an environment of ``servers`` server instances that the open-file limit cannot hold
    (:data:`FDS_PER_SERVER` each on top of :data:`BASE_FDS`). Raises :class:`SettingsError`
    :data:`CODE_NOFILE` naming the limit, the need and the fix."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = BASE_FDS + FDS_PER_SERVER * servers
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    fit = max(0, (soft - BASE_FDS) // FDS_PER_SERVER)
    raise SettingsError(
        f"the open-file limit (RLIMIT_NOFILE) is {soft} (hard limit {hard}): {servers} server instance(s) "
        f"need about {need} descriptors in the daemon ({FDS_PER_SERVER} per server, {BASE_FDS} for itself); "
        f"{fit} would fit",
        code=CODE_NOFILE,
        hint=f"raise the hard limit to at least {need}: `ulimit -Hn {need}` in the launching shell as root, "
        f"LimitNOFILE={need} in a systemd unit, `--ulimit nofile={need}:{need}` for docker/podman, or "
        "nofile in /etc/security/limits.conf",
    )
