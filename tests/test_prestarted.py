"""The prestarted ``python -m kvx`` and ``python -m kvx.aggregate`` processes the end-to-end tests run
(tests/prestarted.py) behave as cold ones: the same output, errors, exit codes and files, and a cold
process wherever the environment asks for one. Killing one (kill -9, Ctrl-C) and the worker identity
it logs are exercised by tests/test_concurrency.py."""

from __future__ import annotations

import os
import subprocess
import sys

import prestarted
import pytest


def cold(module: str, args: list[str], cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def served(module: str, args: list[str], cwd) -> subprocess.CompletedProcess:
    proc = prestarted.popen(module, args, cwd)
    assert isinstance(proc, prestarted.Prestarted)
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize(
    ("module", "args", "code"),
    [
        ("kvx", ["--cfg", "job", "press=tova", "ratio=0.25"], 0),
        ("kvx", ["press=tovaa"], 2),
        ("kvx", ["-m", "ratio=0.5,1.5"], 2),
        ("kvx.aggregate", ["--records", "nowhere", "--no-log"], 2),
    ],
    ids=["config", "unknown-name", "bad-value", "aggregate-no-records"],
)
def test_a_prestarted_process_prints_and_exits_as_a_cold_one(tmp_path, module, args, code):
    want, got = cold(module, args, tmp_path), served(module, args, tmp_path)
    assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout, want.stderr)
    assert want.returncode == code and "Traceback" not in want.stderr  # each case is the one it names


def test_a_prestarted_aggregate_writes_what_a_cold_one_writes(tmp_path):
    from kvx.testing.synthetic import Grid, write_records

    write_records(tmp_path / "records", Grid(n_sources=3, diagnostics=False, intervention=False))
    for name, run in (("cold", cold), ("served", served)):
        args = ["--records", "records", "--no-log", "--no-plots", "--out", name]
        done = run("kvx.aggregate", args, tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
    for table in ("matrix.csv", "problems.csv"):
        assert (tmp_path / "served" / table).read_text() == (tmp_path / "cold" / table).read_text()


def test_only_an_environment_read_at_run_time_is_served(tmp_path):
    """MLflow's store differs per test; a ``PYTHONPATH`` (plugins, a ``sitecustomize`` hook) acts as
    Python starts, so it gets a cold process."""
    args = ["--cfg", "job", "press=tova"]
    served = prestarted.popen("kvx", args, tmp_path, os.environ | {"MLFLOW_TRACKING_URI": "sqlite:///x.db"})
    path = os.pathsep.join([*os.environ.get("PYTHONPATH", "").split(os.pathsep), str(tmp_path)])
    cold = prestarted.popen("kvx", args, tmp_path, os.environ | {"PYTHONPATH": path.strip(os.pathsep)})
    assert isinstance(served, prestarted.Prestarted) and isinstance(cold, subprocess.Popen)
    assert served.communicate(timeout=300)[0] == cold.communicate(timeout=300)[0]
    assert served.returncode == cold.returncode == 0
