"""The bubblewrap sandbox a model-written program runs in: what it sees and the ``bwrap`` command line.

The program sees a read-only view of the interpreter (its executable, its standard library and the
directories of the shared libraries it loads, plus the system library directories and the loader
cache), a private size-capped tmpfs as its working directory, its own program file read-only, a fresh
``/proc`` of its own PID namespace and a minimal ``/dev``; nothing else of the host (nothing else of
``/etc``, no ``/tmp``, home directories, project or virtual environment). It has no network, no IPC
or UTS shared with the host, and its root and ``/dev`` are read-only.

Run as root, ``bwrap`` gets no user namespace: it keeps only CAP_SETUID and CAP_SETGID for the
program's first lines (``executor``'s prelude), which drop to nobody, so the program runs as the real
uid 65534 with no capabilities. (Inside a user namespace made by root the sandbox uid maps to the real
uid 0, and the kernel never applies RLIMIT_NPROC to uid 0: a fork bomb would not be contained.) Run as
any other user, ``bwrap`` makes a user namespace mapping the caller's own uid, and the program may not
make further ones; RLIMIT_NPROC then counts the processes of that namespace.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

#: the first bubblewrap with every option used here (``--disable-userns``, ``--size``)
MIN_VERSION = (0, 8, 0)
#: where the program's working directory and file are inside the sandbox
WORK_DIR = "/kvx/work"
PROGRAM = "/kvx/program.py"
#: the system library directories (a symlink among them, as on merged-/usr systems, stays a symlink)
_LIBRARY_DIRS = ("/lib", "/lib32", "/lib64", "/libx32", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libx32")
#: read by the dynamic loader to find libraries; holds library paths only
_LOADER_CACHE = "/etc/ld.so.cache"
_NAMESPACES = ("--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts")
#: the layers every sandboxed run gets, as ``Outcome.isolation`` names them
LAYERS = ("mountns", "pidns", "netns", "ipcns", "utsns")

# Run by the interpreter itself (trusted, on the host, once per interpreter): where its files are. It
# imports the standard modules that load shared libraries so that their directories are seen too.
_QUERY = r"""
import json, os, sys, sysconfig
for name in ("math", "hashlib", "decimal", "zlib", "bz2", "lzma", "ssl", "sqlite3", "ctypes", "json",
             "random", "datetime", "fractions", "statistics", "unicodedata", "array", "select"):
    try:
        __import__(name)
    except Exception:
        pass
paths = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})
libraries = set()
with open("/proc/self/maps") as maps:
    for line in maps:
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith("/") and ".so" in os.path.basename(fields[5]):
            libraries.add(os.path.dirname(fields[5].strip()))
print(json.dumps({
    "executable": os.path.realpath(getattr(sys, "_base_executable", "") or sys.executable),
    "stdlib": sorted({os.path.realpath(paths[key]) for key in ("stdlib", "platstdlib")}),
    "libraries": sorted(libraries),
}))
"""


@dataclass(frozen=True)
class View:
    """The host paths a sandboxed interpreter sees, each read-only at its own path."""

    executable: str
    read_only: tuple[str, ...]
    symlinks: tuple[tuple[str, str], ...]  # (target, link)


def find_bwrap() -> str | None:
    """The ``bwrap`` executable: on PATH, else Debian's location (kvx's own PATH may be minimal)."""
    found = shutil.which("bwrap")
    if found is None and os.access("/usr/bin/bwrap", os.X_OK):
        found = "/usr/bin/bwrap"
    return found


def version(bwrap: str) -> tuple[int, ...] | None:
    """``bwrap --version`` as numbers; None if it does not say."""
    try:
        done = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", done.stdout)
    return tuple(int(part or 0) for part in found.groups()) if found else None


@functools.cache
def interpreter_view(python: str) -> View:
    """The view of ``python``'s base installation (not its virtual environment): asked of the
    interpreter, since only it knows its prefix and the libraries it loads. Raises OSError if it cannot
    say."""
    try:
        done = subprocess.run(
            [python, "-s", "-c", _QUERY],
            env={"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise OSError(f"could not ask {python} where its files are: {exc}") from exc
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit code {done.returncode}"]
        raise OSError(f"could not ask {python} where its files are: {lines[-1]}")
    found = json.loads(done.stdout)
    symlinks = tuple((os.readlink(path), path) for path in _LIBRARY_DIRS if os.path.islink(path))
    system = [path for path in _LIBRARY_DIRS if os.path.isdir(path) and not os.path.islink(path)]
    wanted = system + [_LOADER_CACHE] * os.path.isfile(_LOADER_CACHE)
    wanted += [*found["stdlib"], *found["libraries"], found["executable"]]
    return View(found["executable"], _outermost(path for path in wanted if os.path.exists(path)), symlinks)


def _outermost(paths: object) -> tuple[str, ...]:
    """The paths with every one inside another dropped: one bind covers its subtree."""
    kept: list[str] = []
    for path in sorted(set(paths)):  # a parent sorts before its children
        if not any(path == parent or path.startswith(parent.rstrip("/") + "/") for parent in kept):
            kept.append(path)
    return tuple(kept)


def _parents(paths: list[str]) -> list[str]:
    """Every directory above ``paths`` up to, not including, ``/``, parents first."""
    found = set()
    for path in paths:
        parent = os.path.dirname(path)
        while parent != "/":
            found.add(parent)
            parent = os.path.dirname(parent)
    return sorted(found)


def bwrap_arguments(view: View, script: str, work_bytes: int, as_root: bool) -> list[str]:
    """``bwrap``'s options, up to the ``--`` before the command (see the module docstring)."""
    arguments = ["--die-with-parent", *_NAMESPACES]
    if as_root:  # the prelude's drop to nobody needs these two; they are gone once it has run
        arguments += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        arguments += ["--unshare-user", "--disable-userns"]
    # bwrap would make the missing parents of a mount point 0700, which nobody could not traverse
    for parent in _parents([*view.read_only, PROGRAM, WORK_DIR]):
        arguments += ["--dir", parent]
    for path in view.read_only:
        arguments += ["--ro-bind", path, path]
    for target, link in view.symlinks:
        arguments += ["--symlink", target, link]
    arguments += ["--proc", "/proc", "--dev", "/dev", "--ro-bind", script, PROGRAM]
    arguments += ["--size", str(work_bytes), "--perms", "0777", "--tmpfs", WORK_DIR, "--chdir", WORK_DIR]
    return arguments + ["--remount-ro", "/dev", "--remount-ro", "/"]
