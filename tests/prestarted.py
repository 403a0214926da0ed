"""``python -m kvx`` processes forked from one that already imported what a run imports.

A cold ``python -m kvx`` spends ~15 s of CPU importing torch, transformers, kvpress and MLflow before it
reads its command line (``python -m kvx.aggregate`` ~2 s, pandas and scipy); the end-to-end tests start
dozens. Here one server process per session does those
imports once, in the order a run does them (``kvx.__main__``, then ``lean_imports.install()`` and
``kvx.cli.app``, as ``_hydra_main`` does), forgets kvx's own modules (~0.5 s to import again, and their
module-level state must be the child's), and forks a child per command. The child is a real process of
its own (its own pid and process group, killable with ``kill -9`` or Ctrl-C, racing other workers on the
store), set up as the interpreter sets up ``python -m kvx``: the test's argv, cwd, environment and pipes,
``sys.path[0]`` the working directory, ``__main__`` run by :func:`runpy._run_module_as_main`, SIGINT
raising KeyboardInterrupt, torch's and numpy's global seeds drawn afresh; an exception or exit ends it as
it ends the interpreter (exit handlers, a traceback and status 1, or death by SIGINT).

What a cold start alone exercises (the import path, ``KVX_LEAN_IMPORTS``, plugins found on a
``PYTHONPATH`` of the test's, a ``sitecustomize`` hook) is not served here: :func:`popen` falls back to a
real ``python -m`` whenever the environment differs in anything but :data:`RUNTIME_ENV` (read when used,
not at import), and tests whose subject is start-up call :mod:`subprocess` themselves.

Run as a script, this file is the server: ``python prestarted.py SOCKET MODULE``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

#: environment variables that may differ between the server and a child: each is read when a run
#: uses it (MLflow's store and S3 endpoint, boto3's keys, the tokenizers' thread switch, Ray's
#: telemetry switch), never while the preloaded modules import
RUNTIME_ENV = frozenset(
    {
        "MLFLOW_TRACKING_URI",
        "MLFLOW_S3_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_DEFAULT_REGION",
        "TOKENIZERS_PARALLELISM",
        "RAY_USAGE_STATS_ENABLED",
        "PYTEST_CURRENT_TEST",  # pytest's name of the running test
        "KVX_TEST_SERVED_KEY",  # tests/test_served.py's API key, read by the endpoint client when it sends
    }
)

#: what each served module imports before it reads its command line, in a run's order: ``NAME`` is
#: imported, ``NAME:FUNCTION`` imported and called. Last, MLflow's SQL store, which MLflow imports when
#: a run first opens its store (~2 s of CPU, in every child otherwise); importing it opens nothing.
SQL_STORE = "mlflow.store.tracking.sqlalchemy_store"
PRELOAD = {
    "kvx": ["kvx.__main__", "kvx.core.lean_imports:install", "kvx.cli.app", SQL_STORE],
    # reading an MLflow store also imports Hydra (kvx.cli.config, for the runs' configs): ~0.3 s
    "kvx.aggregate": ["kvx.aggregate.__main__", SQL_STORE, "hydra", "omegaconf"],
}
#: the project's own packages: forgotten once the libraries they import are in memory
OWN = ("kvx",)


# --- the server (a script of its own: pytest's process never forks) ---


def _preload(module: str) -> None:
    """Import the libraries a run of ``module`` imports, as the run imports them (kvx's import hook
    in place), then forget kvx's own modules and hook: each child imports kvx afresh, as a cold
    process does, so module-level state (a worker's pid and id in ``kvx.stores.leases``) is its own."""
    import importlib

    for step in PRELOAD[module]:
        name, _, call = step.partition(":")
        imported = importlib.import_module(name)
        if call:
            getattr(imported, call)()
    sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith(OWN)]
    for name in [n for n in sys.modules if n in OWN or n.startswith(tuple(f"{p}." for p in OWN))]:
        del sys.modules[name]


def _check_forkable() -> None:
    """A fork copies only the calling thread: refuse to serve if the imports started a Python thread.
    (Native pools started at import, OpenBLAS's under numpy and jemalloc's under pyarrow, restart
    themselves in a child through their fork handlers, as for any ``fork`` after ``import torch``.)"""
    if threading.active_count() != 1:
        raise SystemExit(f"prestarted: the preloaded imports started threads: {threading.enumerate()}")


def _serve(path: str, module: str) -> None:
    import selectors

    _preload(module)
    _check_forkable()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print("ready", flush=True)
    children: dict[int, socket.socket] = {}
    events = selectors.DefaultSelector()
    events.register(listener, selectors.EVENT_READ)
    events.register(sys.stdin, selectors.EVENT_READ)  # the session's pipe: its end ends the server too
    while True:
        for key, _ in events.select(timeout=0.05):
            if key.fileobj is sys.stdin:  # leave without tearing down torch and friends (seconds)
                os._exit(0)
            conn, _ = listener.accept()
            request, fds = _receive(conn)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                events.close()
                listener.close()
                for other in children.values():
                    other.close()
                conn.close()
                _child(module, request, fds)  # never returns
            for fd in fds:
                os.close(fd)
            conn.sendall(f"{pid}\n".encode())
            children[pid] = conn
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = children.pop(pid)
            with contextlib.suppress(OSError):  # the test stopped listening: nothing to tell
                conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            conn.close()


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds = b"", []
    while not data.endswith(b"\n"):
        chunk, more, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        if not chunk:
            break
        data += chunk
        fds += more
    return json.loads(data), fds


def _child(module: str, request: dict, fds: list[int]) -> None:
    """Become ``python -m MODULE ARGS`` in the request's folder, environment and pipes. Leaves by
    raising out of the server's frames, so the interpreter ends the process as it ends any script."""
    import runpy
    import signal
    import types

    os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # a fresh process seeds these from the OS; forked, each would repeat the server's (random's own
    # global generator reseeds itself after a fork)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if "torch" in sys.modules:
        sys.modules["torch"].seed()
    sys.path[0] = os.getcwd()
    sys.argv = [module, *request["args"]]
    sys.modules["__main__"] = types.ModuleType("__main__")
    runpy._run_module_as_main(module, alter_argv=True)
    raise SystemExit(0)


# --- the client (pytest's side) ---


class Prestarted:
    """The part of :class:`subprocess.Popen` the tests use, for a forked child: ``pid``, ``returncode``,
    ``poll``, ``wait``, ``communicate``, ``send_signal``, ``kill``. Its exit status comes from the
    server, which reaps it."""

    def __init__(self, args: list[str], conn: socket.socket, pid: int, buf: bytes, outs: dict) -> None:
        self.args, self.pid, self.returncode = args, pid, None
        self._conn, self._buf, self._outs = conn, buf, outs
        self.stdout = outs.get("stdout")
        self.stderr = outs.get("stderr")

    def _status(self, timeout: float | None) -> int | None:
        """The exit status the server sends when it reaps the child; None if it has not come yet."""
        import select

        while b"\n" not in self._buf:
            if not select.select([self._conn], [], [], timeout)[0]:
                return None
            chunk = self._conn.recv(64)
            if not chunk:
                raise RuntimeError(f"prestarted: the server went away before {self.args} ended")
            self._buf += chunk
        self._conn.close()
        return int(self._buf)

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._status(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._status(timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple:
        """Reads both pipes to their end (as Popen does, on threads) and waits."""
        results: dict[str, object] = {}

        def drain(name: str) -> None:
            results[name] = self._outs[name].read()

        readers = [threading.Thread(target=drain, args=(n,), daemon=True) for n in self._outs]
        for t in readers:
            t.start()
        for t in readers:
            t.join(timeout)
            if t.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(timeout)
        for f in self._outs.values():
            f.close()
        return results.get("stdout"), results.get("stderr")

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        import signal

        self.send_signal(signal.SIGKILL)


class _Server:
    def __init__(self, module: str, env: dict[str, str]) -> None:
        self.module, self.env = module, env
        self.folder = tempfile.mkdtemp(prefix="kvx-prestarted-")
        self.path = os.path.join(self.folder, "socket")
        self.log = open(os.path.join(self.folder, "server.log"), "w+")  # noqa: SIM115 - the server's
        self.process = subprocess.Popen(
            [sys.executable, __file__, self.path, module],
            cwd=self.folder,
            env=env,
            stdin=subprocess.PIPE,  # closed when the session ends, however it ends
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            start_new_session=True,
        )
        if self.process.stdout.readline().strip() != "ready":
            self.process.wait(timeout=60)
            self.log.seek(0)
            raise RuntimeError(f"prestarted: the {module} server did not start: {self.log.read()[-3000:]}")

    def start(self, args: list[str], cwd: Path, env: dict[str, str], stdout, stderr, text: bool):
        outs, fds, mine = {}, [], []
        for name, how in (("stdin", subprocess.DEVNULL), ("stdout", stdout), ("stderr", stderr)):
            if how == subprocess.PIPE:
                read, write = os.pipe()
                outs[name] = open(read, encoding="utf-8", errors="replace") if text else open(read, "rb")  # noqa: SIM115
                fds.append(write)
                mine.append(write)
            else:
                fd = os.open(os.devnull, os.O_RDWR)
                fds.append(fd)
                mine.append(fd)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self.path)
        request = {"args": args, "cwd": str(cwd), "env": env}
        socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], fds)
        for fd in mine:
            os.close(fd)
        buf = b""
        while b"\n" not in buf:
            chunk = conn.recv(64)
            if not chunk:
                raise RuntimeError(f"prestarted: the {self.module} server did not start {args}")
            buf += chunk
        pid, _, rest = buf.partition(b"\n")
        return Prestarted([sys.executable, "-m", self.module, *args], conn, int(pid), rest, outs)

    def stop(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)
        self.log.close()
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)


_SERVERS: dict[str, _Server] = {}


def _import_time(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in RUNTIME_ENV}


def popen(
    module: str,
    args: list[str],
    cwd,
    env: dict[str, str] | None = None,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text: bool = True,
):
    """``python -m MODULE ARGS`` in ``cwd``, in a session of its own with SIGINT as in a terminal: a
    child of the prestarted server, or a real process where the environment asks for a cold start (see
    the module's docstring)."""
    env = dict(os.environ if env is None else env)
    server = _SERVERS.get(module)
    served = _import_time(os.environ if server is None else server.env)  # the tests' own environment
    if module not in PRELOAD or _import_time(env) != served:
        import signal

        return subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=cwd,
            env=env,
            stdout=stdout,
            stderr=stderr,
            text=text,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    if server is None:
        server = _SERVERS[module] = _Server(module, env)
    return server.start(list(args), Path(cwd), env, stdout, stderr, text)


def run(module: str, args: list[str], cwd, env: dict[str, str] | None = None, timeout: float | None = None):
    """:func:`subprocess.run` with ``capture_output=True, text=True`` over :func:`popen`: the process is
    killed if it outlives ``timeout``."""
    proc = popen(module, args, cwd, env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def stop_all() -> None:
    while _SERVERS:
        _SERVERS.popitem()[1].stop()


if __name__ == "__main__":
    sys.path[0] = os.getcwd()  # as for ``python -m``: this file's folder (tests/) is not importable
    _serve(sys.argv[1], sys.argv[2])
