"""kvx's commands as a test runs them: in this process through their ``main(argv) -> int``, or, where
the subject is what only a real process shows (signals, several workers racing, a launcher's
children), as a real ``python -m kvx``.

In-process, a command sees what a process of its own would: its working directory, its environment,
its ``sys.argv`` and its own stdout and stderr (captured); an exception that would end the process
with a traceback comes back as exit code 1 with that traceback on stderr. What it changed in the
process's shared state (the working directory, the environment, the root logger's handlers Hydra
configured) is put back when it returns.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import os
import signal
import subprocess
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

#: a sweep small enough for a test: the tiny reader, a short context, four new tokens, no diagnostics
TINY_SWEEP = ["reader=tiny", "context_tokens=300", "max_new_tokens=4", "progress=false", "diagnostics=[]"]
#: one worker alone on its store: no rival's claim can land, so the pause that lets them (settle_s) only
#: waits
SOLO_LEASE = ["lease.settle_s=0.05"]
#: several workers on one store. A worker killed on this machine is known dead at once (its pid), so
#: stale_s only guards other machines; it stays long because many workers on 2 cores can starve a
#: heartbeat thread for seconds
FAST_LEASE = ["lease.settle_s=0.3", "lease.poll_s=0.5", "lease.heartbeat_s=2", "lease.stale_s=60"]

#: the commands that run in-process: module -> where its ``main(argv) -> int`` is
MAINS = {
    "kvx": "kvx.cli.main",
    "kvx.aggregate": "kvx.aggregate.__main__",
    "kvx.importers": "kvx.importers.__main__",
    "kvx.plugins": "kvx.plugins",
    "kvx.server": "kvx.server",
}


def kvx_env(uri: str | None = None, **extra: str) -> dict[str, str]:
    """This process's environment without a tracking URI of its own, or pointed at ``uri``."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env |= {"TOKENIZERS_PARALLELISM": "false", "RAY_USAGE_STATS_ENABLED": "0"}
    if uri:
        env["MLFLOW_TRACKING_URI"] = uri
    return env | extra


def run(
    module: str, args: Sequence[str], cwd: str | Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS`` in ``cwd``, run in this process: what :func:`subprocess.run` with
    ``capture_output=True, text=True`` would return."""
    main = importlib.import_module(MAINS[module]).main
    out, err = io.StringIO(), io.StringIO()
    with (
        _as_a_process(module, args, cwd, env),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            code = main(list(args))
        except Exception:  # a process would end with its traceback and 1
            traceback.print_exc()
            code = 1
    return subprocess.CompletedProcess(
        [sys.executable, "-m", module, *args], code, out.getvalue(), err.getvalue()
    )


def run_kvx(folder: str | Path, *args: str) -> None:
    """``python -m kvx -m ARGS`` in ``folder``, in-process; fails with its stderr."""
    done = run("kvx", ["-m", *args], folder)
    assert done.returncode == 0, done.stderr[-3000:]


def aggregate_strict(cwd: Path, uri: str | None = None, experiment: str = "kvx") -> str:
    """``python -m kvx.aggregate --strict`` in-process must exit 0; returns what it printed."""
    args = ["--no-plots", "--no-log", "--strict", "--experiment", experiment, "--out", str(cwd / "agg")]
    done = run("kvx.aggregate", args, cwd, kvx_env(uri))
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return done.stdout + done.stderr


def popen(
    module: str,
    args: Sequence[str],
    cwd: str | Path,
    env: Mapping[str, str] | None = None,
    stdout: int | None = subprocess.PIPE,
    stderr: int | None = subprocess.PIPE,
) -> subprocess.Popen:
    """A real ``python -m MODULE ARGS`` in ``cwd``, in a session of its own, with SIGINT raising
    KeyboardInterrupt as in a terminal even where the tests were started in the background (``cmd &``
    in a script leaves SIGINT ignored)."""
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=dict(os.environ if env is None else env),
        stdout=stdout,
        stderr=stderr,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def sweep(cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m kvx -m`` on the tiny reader with fast leases, in-process (see :func:`run`)."""
    return run("kvx", ["-m", *TINY_SWEEP, *FAST_LEASE, *args], cwd, env or kvx_env())


def start_sweep(cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen:
    """The same sweep as :func:`sweep`, a real process (see :func:`popen`)."""
    return popen("kvx", ["-m", *TINY_SWEEP, *FAST_LEASE, *args], cwd, env or kvx_env())


def finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
    """(exit code, stderr) of a started process."""
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def plan(*args: str) -> list[dict]:
    """The sweeps ``python -m kvx -m ARGS`` would run, each with its checked cells and jobs
    (``hydra.sweeper.plan=json``), in this process; nothing runs or is written. Fails with kvx's line."""
    import json

    done = run("kvx", ["-m", *args, "hydra.sweeper.plan=json"], os.getcwd())
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)["sweeps"]


def refused(*args: str) -> str:
    """kvx's one line for a command it refuses (exit 2), in this process."""
    done = run("kvx", args, os.getcwd())
    assert done.returncode == 2, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("kvx: ")]
    assert len(lines) == 1, done.stderr[-3000:]
    return lines[0]


def composed(*overrides: str, config_dir: str | None = None, return_hydra: bool = False):  # noqa: ANN201
    """One cell's config as Hydra composes it (``hydra`` node removed), with kvx's shipped configs,
    installed plugins' configs and ``config_dir`` (as ``--config-dir`` adds it)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from kvx.core.conf import conf_dir

    with initialize_config_dir(config_dir=conf_dir(), version_base="1.3"):
        extra = [f"hydra.searchpath=[file://{config_dir}]"] if config_dir else []
        cfg = compose("config", overrides=[*extra, *overrides], return_hydra_config=return_hydra)
    if not return_hydra:
        with open_dict(cfg):
            cfg.pop("hydra", None)
    return cfg


@contextlib.contextmanager
def _as_a_process(
    module: str, args: Sequence[str], cwd: str | Path, env: Mapping[str, str] | None
) -> Iterator[None]:
    """The working directory, environment and ``sys.argv`` a ``python -m MODULE ARGS`` would have, and
    back to this process's afterwards."""
    saved_cwd, saved_env, saved_argv = os.getcwd(), dict(os.environ), sys.argv
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    os.chdir(cwd)
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    sys.argv = [module, *args]
    try:
        yield
    finally:
        mlflow = sys.modules.get("mlflow")
        if mlflow is not None:  # a process's tracking URI ends with it: MLflow keeps one per process
            mlflow.set_tracking_uri(None)
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        for handler in root.handlers:
            if handler not in saved_handlers:
                handler.close()
        root.handlers[:], root.level = saved_handlers, saved_level
