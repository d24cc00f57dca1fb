"""How servers are grouped into sandboxes under the ``opensandbox`` backend (docs/runtime.md, "One
sandbox per venv"): the one seam that decides it, and what runs in a group's sandbox besides its
servers.

The servers of one environment package are one trust domain, so the servers that run on the same
venv share a sandbox (:func:`group_key`): one create, one execd, one forwarder and one preloaded
parent (:mod:`._parent`) for all of them, as the venv is the local backend's unit of preloading
too. A server that starts its own Ray cluster (``gym_runtime/ray/own.py``) keeps a sandbox of its
own: its Ray wants the sandbox's ``/tmp/ray``, its CPUs and at least 2048 MiB to itself.

What stays each server's own inside a shared sandbox: its secrets (its private variables reach it
alone, after the fork, and it is not dumpable: :data:`LAUNCHER`), its command, session and process
group, its log (its command's output, read by cursor), and its limits (:data:`LAUNCHER`: ``nofile``
as an rlimit, memory and processes watched over its process group). What the group shares: the
sandbox's filesystem and ``/tmp``, its pid namespace and network, its CPU and memory limits (the
sum of its members': :func:`group_spec`), and its lifetime: a server's exit or restart ends its
own command only; the sandbox is deleted when its last member has ended, or when it is gone from
outside (every member then restarts into a new one).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from ..limits import ResourceLimits

FORWARDER = (Path(__file__).parent / "forwarder.py").read_text()  # both run with -c by the venv's interpreter
# the parent's command: sandbox/_immortal.py's text, then _parent.py's, which calls its immortalize()
PARENT = (Path(__file__).parent.parent / "_immortal.py").read_text() + (
    Path(__file__).parent / "_parent.py"
).read_text()
PARENT_SOCKET = "/tmp/gym-runtime-parent.sock"  # in the sandbox's own /tmp
# set (to "1") in the environment of a server that starts its own Ray, and only there
# (gym_runtime/ray/own.py's server_env; the sandbox room cannot import it)
OWN_RAY_MARK = "RAY_DISABLE_DOCKER_CPU_WARNING"
# exit codes of LAUNCHER when it ended its server over a limit, and the reasons they stand for
LIMIT_EXITS = {250: "memory-limit", 251: "pids-limit"}

# Run by the server's own interpreter with -I -S: argv[1] its limits, the names of its private
# variables and its group's preloaded parent (JSON: nofile, memory_mb, pids, private, parent: the
# parent's socket or null), argv[2] its name, argv[3:] the server. First makes itself not dumpable
# (PR_SET_DUMPABLE 0: a sibling, the same uid in the same sandbox but without CAP_SYS_PTRACE, can
# no longer read its environment or memory), holds SIGTERM, SIGINT and SIGHUP back until it knows
# where its server is, and takes the private variables out of its environment. Then the server:
# forked by the parent (sandbox/opensandbox/_parent.py: it sends the request with its stdout and
# stderr, then the private variables to the child alone; forwards
# SIGTERM, SIGINT and SIGHUP to the server's process group; the parent says the exit), or, with no
# parent or one that says no, forked here and exec'd through BOOT, which gets them on a pipe
# (never in an environment a sibling can read); here execd signals the whole process group. Every
# second it sums the RSS and counts the processes of the server's process group, killing the group
# over a limit (exit 250 memory, 251 processes, said in the log); else exits as the server
# (a parent that ended under it: 1, said in the log).
LAUNCHER = r"""
import ctypes
ctypes.CDLL(None).prctl(4,0,0,0,0)
import json,os,resource,select,signal,socket,sys,time
sigs={signal.SIGTERM,signal.SIGINT,signal.SIGHUP};signal.pthread_sigmask(signal.SIG_BLOCK,sigs)
lim=json.loads(sys.argv[1]);name=sys.argv[2];argv=sys.argv[3:]
sec={k:os.environ.pop(k) for k in lim.get("private") or () if k in os.environ}
def say(m):print("gym-runtime: "+m,file=sys.stderr,flush=True)
def forked():
 p=lim.get("parent")
 if not p:return None
 end=time.monotonic()+10
 while not os.path.exists(p):
  if time.monotonic()>end:return None
  time.sleep(0.05)
 c=socket.socket(socket.AF_UNIX,socket.SOCK_SEQPACKET)
 try:
  c.connect(p)
  req={"name":name,"argv":argv,"cwd":os.getcwd(),"env":dict(os.environ),"nofile":lim.get("nofile")}
  socket.send_fds(c,[json.dumps(req).encode()],[1,2])
  c.settimeout(lim.get("wait_s") or 300)
  a=json.loads(c.recv(65536) or b"{}")
  if "pid" not in a:
   if a.get("no"):say(a["no"]+": the server starts on its own")
   c.close();return None
  c.settimeout(None);c.send(json.dumps(sec).encode())
  return a["pid"],c
 except (OSError,ValueError):
  c.close();return None
got=forked()
if got:
 pid,conn=got;pg=pid
 def fwd(s,f):
  try:os.killpg(pid,s)
  except OSError:pass
 for s in sigs:signal.signal(s,fwd)
else:
 if lim.get("nofile"):
  s,h=resource.getrlimit(resource.RLIMIT_NOFILE);n=lim["nofile"]
  resource.setrlimit(resource.RLIMIT_NOFILE,(n if h<0 else min(n,h),h))
 r,w=os.pipe()
 pid=os.fork()
 if pid==0:
  os.close(w);os.set_inheritable(r,True);signal.pthread_sigmask(signal.SIG_SETMASK,[])
  os.execve(argv[0],[argv[0],"-c",BOOT,name,str(r),*argv[1:]],dict(os.environ))
 os.close(r)
 try:
  b=json.dumps(sec).encode()
  while b:b=b[os.write(w,b):]
 except OSError:pass
 os.close(w);conn=None;pg=os.getpgrp()
 for s in sigs:signal.signal(s,lambda*a:None)
signal.pthread_sigmask(signal.SIG_UNBLOCK,sigs)
me,page=os.getpid(),os.sysconf("SC_PAGE_SIZE")
mem=(lim.get("memory_mb") or 0)*2**20;cap=lim.get("pids") or 0
def tree():
 out=[]
 for p in os.listdir("/proc"):
  if not p.isdigit() or int(p)==me:continue
  try:f=open("/proc/"+p+"/stat").read().rsplit(")",1)[1].split()
  except (OSError,IndexError):continue
  if int(f[2])==pg:out.append((int(p),int(f[21])*page))
 return out
def code(st):return os.waitstatus_to_exitcode(st) if os.WIFEXITED(st) else 128+os.WTERMSIG(st)
while 1:
 if conn is None:
  try:w,st=os.waitpid(pid,os.WNOHANG)
  except InterruptedError:continue
  if w:sys.exit(code(st))
  time.sleep(1)
 else:
  try:
   if select.select([conn],[],[],1.0)[0]:
    m=conn.recv(65536)
    if not m:
     say("the preloaded parent of its sandbox ended: the server is killed")
     try:os.killpg(pid,9)
     except OSError:pass
     sys.exit(1)
    sys.exit(code(json.loads(m)["status"]))
  except InterruptedError:continue
 if mem or cap:
  t=tree();r=sum(x for _,x in t)
  over=(250,"memory",r>>20,mem>>20,"MiB of RSS") if mem and r>mem else (251,"process",len(t),cap,"processes") if cap and len(t)>cap else None
  if over:
   say("server over its %s limit (%d of %d %s): its process group killed"%over[1:])
   for q,_ in t:
    try:os.kill(q,9)
    except OSError:pass
   if conn is None:os.waitpid(pid,0)
   sys.exit(over[0])
"""

# Run by the server's interpreter as ``python -c BOOT NAME FD ARGV...`` (its site, its venv): not
# dumpable and named NAME (its ``comm``) first, then the private variables from pipe FD into its
# environment, then the server as ``python ARGV...`` would run it (a script: its directory first
# on sys.path; ``-m module``: the working directory), in this process, so only it (and what it
# starts) holds them.
BOOT = r"""
import ctypes,os,sys
libc=ctypes.CDLL(None);libc.prctl(4,0,0,0,0);libc.prctl(15,sys.argv[1].encode()[:15],0,0,0)
fd=int(sys.argv[2]);b=b""
while 1:
 c=os.read(fd,65536)
 if not c:break
 b+=c
os.close(fd)
import json,runpy
os.environ.update(json.loads(b or b"{}"))
a=sys.argv[3:]
if a[0]=="-m":
 sys.argv=[a[1],*a[2:]];sys.path[0]=os.getcwd();runpy.run_module(a[1],run_name="__main__",alter_sys=True)
else:
 sys.argv=a;sys.path[0]=os.path.dirname(os.path.abspath(a[0]));runpy.run_path(a[0],run_name="__main__")
"""
LAUNCHER = LAUNCHER.replace("BOOT", repr(BOOT), 1)


def group_key(spec: Any) -> str:
    """The group of server ``spec`` (a :class:`sandbox.launch.ProcessSpec`): ``venv:<its venv>``
    (``argv[0]``'s grandparent), or ``server:<name>`` for a server with its own Ray."""
    if spec.env.get(OWN_RAY_MARK) == "1":
        return f"server:{spec.name}"
    return f"venv:{Path(str(spec.argv[0])).parent.parent}"


@dataclass(frozen=True)
class GroupSpec:
    """What a sandbox of a group is created with: ``name`` (its label: the first member's name, plus
    ``+N`` for N others), the members' interpreter (``argv``), the union of their read-only paths
    (their working directories among them) and writable paths, copy-on-write paths and ports,
    ``limits`` (memory: the members' sum, unlimited when one is), ``members`` (names);
    ``preload``: the modules its preloaded parent imports (the first member's ``ProcessSpec.preload``),
    None for a group of one server or with preloading off (``GYM_RUNTIME_PRELOAD=off``), and
    ``parent_env`` its environment (the first member's, without what the preload withholds)."""

    name: str
    argv: tuple[str, ...]
    cwd: str
    read_only_paths: tuple[str, ...]
    writable_paths: tuple[str, ...]
    limits: ResourceLimits
    members: tuple[str, ...]
    cow_paths: dict[str, str] = field(default_factory=dict)
    ports: tuple[int, ...] = ()
    preload: tuple[str, ...] | None = None
    parent_env: dict[str, str] = field(default_factory=dict)


def group_spec(specs: list[Any]) -> GroupSpec:
    """The :class:`GroupSpec` of the servers ``specs`` (one group, in start order; not empty)."""
    first = specs[0]
    ro: dict[str, None] = {}
    rw: dict[str, None] = {}
    for s in specs:
        ro.update(dict.fromkeys(str(p) for p in (*s.read_only_paths, s.cwd)))
        rw.update(dict.fromkeys(str(p) for p in s.writable_paths))
    mems = [s.limits.memory_mb for s in specs]
    memory = sum(mems) if all(mems) else None
    pre = first.preload if len(specs) > 1 else None
    return GroupSpec(
        name=first.name + (f"+{len(specs) - 1}" if len(specs) > 1 else ""),
        argv=tuple(str(a) for a in first.argv[:1]),
        cwd=str(first.cwd),
        read_only_paths=tuple(ro),
        writable_paths=tuple(rw),
        limits=ResourceLimits(memory_mb=memory, pids=None, nofile=None),
        members=tuple(s.name for s in specs),
        cow_paths={k: v for s in specs for k, v in s.cow_paths.items()},
        ports=tuple(p for s in specs for p in s.ports),
        # Ray aside: a server that uses it keeps a sandbox of its own, so none of a shared one does
        preload=tuple(m for m in pre.modules if m != "ray") if pre is not None else None,
        parent_env={k: v for k, v in first.env.items() if k not in pre.withheld} if pre is not None else {},
    )


_CPU = re.compile(r"^(\d+(?:\.\d+)?)(m?)$")


def group_cpu(cpu: str, members: int) -> str:
    """The ``cpu`` of a sandbox holding ``members`` servers: ``cpu`` (per server, as the server's
    ``resourceLimits`` takes it: ``"1"``, ``"0.5"``, ``"500m"``) times ``members``; a value of
    another form is passed on as it is."""
    m = _CPU.match(cpu.strip())
    if m is None or members <= 1:
        return cpu
    value = Decimal(m.group(1)) * members
    return f"{value.normalize():f}{m.group(2)}"


def launched(spec: Any, parent: str | None) -> list[str]:
    """The command that starts server ``spec`` in a (shared) sandbox: :data:`LAUNCHER`, run by its
    own interpreter, with its limits, the names (not values) of its private variables and
    ``parent`` (its group's preloaded parent's socket, or None), its name, then its ``argv`` (an
    interpreter and a script or ``-m module``, as every server's is)."""
    lim = spec.limits
    limits = {
        "nofile": lim.nofile,
        "memory_mb": lim.memory_mb,
        "pids": lim.pids,
        "private": sorted(spec.private_env),
        "parent": parent,
    }
    return [str(spec.argv[0]), "-I", "-S", "-c", LAUNCHER, json.dumps(limits), spec.name, *(str(a) for a in spec.argv)]


async def start_forwarder(box: Any, gspec: GroupSpec, routes: list[list[Any]]) -> None:
    """In the new sandbox ``box`` of group ``gspec``: the forwarder (:mod:`.forwarder`) of ``routes``
    as an execd background command (none: no forwarder). Raises what the SDK raises."""
    from opensandbox.models.execd import RunCommandOpts

    if routes:
        await box.commands.run(
            [gspec.argv[0], "-I", "-S", "-c", FORWARDER, json.dumps(routes)],
            opts=RunCommandOpts(background=True, working_directory="/"),
        )


async def start_parent(box: Any, gspec: GroupSpec) -> None:
    """In the new sandbox ``box`` of group ``gspec``: its preloaded parent (:mod:`._parent`,
    listening on :data:`PARENT_SOCKET`) as an execd background command, when it has one. Started as
    soon as the sandboxes are made, so its imports overlap the rest of the start. Raises what the SDK raises."""
    from opensandbox.models.execd import RunCommandOpts

    if gspec.preload is not None:
        await box.commands.run(
            [gspec.argv[0], "-c", PARENT, PARENT_SOCKET, json.dumps(list(gspec.preload))],
            opts=RunCommandOpts(background=True, working_directory="/", envs=gspec.parent_env),
        )


@dataclass
class Shared:
    """A group's sandbox while it lives: the SDK's Sandbox and the names of the servers in it."""

    box: Any
    members: set[str] = field(default_factory=set)


class Groups:
    """The run's groups and their sandboxes. ``create(group_spec)`` makes a sandbox (the
    environment's create, with its retries and adoption), ``started(box, group_spec, fresh)``
    readies one for its servers (the forwarder; with ``fresh``, a sandbox not made by ``prepare``,
    the preloaded parent too), ``discard(box)`` deletes one."""

    def __init__(self, create: Any, started: Any, discard: Any) -> None:
        self._create, self._started, self._discard = create, started, discard
        self.specs: dict[str, list[Any]] = {}  # key -> the servers of the group, in start order
        self.ready: dict[str, Any] = {}  # key -> a sandbox made by prepare(), no server in it yet
        self.live: dict[str, Shared] = {}  # key -> its sandbox with servers in it
        self._locks: dict[str, asyncio.Lock] = {}

    def plan(self, specs: list[Any]) -> dict[str, GroupSpec]:
        """Group ``specs`` (every server of the run) and say what each group's sandbox is made with."""
        for s in specs:
            group = self.specs.setdefault(group_key(s), [])
            group[:] = [*(g for g in group if g.name != s.name), s]
        return {k: group_spec(v) for k, v in self.specs.items()}

    def spec_of(self, key: str) -> GroupSpec:
        """What group ``key``'s sandbox is made with (its servers as planned so far)."""
        return group_spec(self.specs[key])

    def members_of(self, spec: Any) -> tuple[str, ...]:
        """The names of the servers of server ``spec``'s group as planned so far (its own among them)."""
        return tuple(s.name for s in self.specs.get(group_key(spec), [])) or (spec.name,)

    def parent_of(self, spec: Any) -> str | None:
        """The socket of the preloaded parent of server ``spec``'s group, None when it has none."""
        return PARENT_SOCKET if self.spec_of(group_key(spec)).preload is not None else None

    async def enter(self, spec: Any) -> Any:
        """The sandbox server ``spec`` starts in: its group's, made (or taken from :attr:`ready`)
        and readied when the group has none."""
        key = group_key(spec)
        if spec.name not in {s.name for s in self.specs.get(key, [])}:
            self.plan([spec])
        async with self._locks.setdefault(key, asyncio.Lock()):
            shared = self.live.get(key)
            if shared is None:
                gspec = self.spec_of(key)
                box = self.ready.pop(key, None)
                fresh = box is None
                if box is None:
                    box = await self._create(gspec)
                try:
                    await self._started(box, gspec, fresh)
                except BaseException:
                    await self._discard(box)
                    raise
                shared = self.live[key] = Shared(box)
            shared.members.add(spec.name)
            return shared.box

    async def leave(self, spec: Any, box: Any, command: str | None, gone: bool) -> None:
        """Server ``spec`` ended in ``box``: its command ``command`` is interrupted (its process
        group ends) while siblings keep the sandbox; the sandbox is deleted when it was the last
        one in it or the sandbox is ``gone`` (deleted or dead: every member starts again in a new one)."""
        if box is None:
            return
        key = group_key(spec)
        shared = self.live.get(key)
        if shared is None or shared.box is not box:  # the group has moved on to a new sandbox
            await self._discard(box)
            return
        shared.members.discard(spec.name)
        if gone or not shared.members:
            self.live.pop(key, None)
            await self._discard(box)
        elif command is not None:
            with contextlib.suppress(Exception):  # ended already: execd answers 500
                await box.commands.interrupt(command)

    async def close(self) -> None:
        """Delete the sandboxes no server entered."""
        for box in list(self.ready.values()):
            await self._discard(box)
        self.ready.clear()
