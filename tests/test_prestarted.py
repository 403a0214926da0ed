"""The prestarted ``python -m kvx`` processes the end-to-end tests run (tests/prestarted.py) behave as
cold ones: the same output, errors and exit codes, and a cold process wherever the environment asks for
one. Killing one (kill -9, Ctrl-C) is exercised by tests/test_concurrency.py."""

from __future__ import annotations

import os
import subprocess
import sys

import prestarted
import pytest


@pytest.mark.parametrize(
    "args",
    [["--cfg", "job", "press=tova", "ratio=0.25"], ["press=tovaa"], ["-m", "ratio=0.5,1.5"]],
    ids=["config", "unknown-name", "bad-value"],
)
def test_a_prestarted_process_prints_and_exits_as_a_cold_one(tmp_path, args):
    cold = subprocess.run(
        [sys.executable, "-m", "kvx", *args], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    proc = prestarted.popen("kvx", args, tmp_path)
    assert isinstance(proc, prestarted.Prestarted)
    out, err = proc.communicate(timeout=300)
    assert (proc.returncode, out, err) == (cold.returncode, cold.stdout, cold.stderr)
    assert cold.returncode == (0 if args[0] == "--cfg" else 2)  # each case is the one it names
    assert "Traceback" not in err


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
