"""Several workers on one embedded store, and the faults a sweep must survive, tried as users meet them:
two identical sweeps started together, eight workers at once, kill -9 and Ctrl-C mid-cell, a full disk,
a corrupt control file. After each: 0 failures, 0 lost and 0 duplicated records, and the aggregate is
clean under ``--strict`` once the command is rerun."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

pytestmark = pytest.mark.slow
TINY = ["reader=tiny", "context_tokens=300", "max_new_tokens=4", "progress=false", "diagnostics=[]"]
LEASE = ["lease.settle_s=0.3", "lease.poll_s=0.5", "lease.heartbeat_s=1", "lease.stale_s=5"]
GRID = ["press=snapkv,tova", "ratio=0.25,0.5", "n_sources=3"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    return env | {"TOKENIZERS_PARALLELISM": "false"} | extra


def start(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "kvx", "-m", *TINY, *LEASE, *args],
        cwd=cwd,
        env=env or _env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def run_ok(cwd: Path, *args: str) -> str:
    """Its log (Hydra writes the job log to stdout) and stderr."""
    proc = start(cwd, *args)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    return out + err


def client(cwd: Path) -> tuple[MlflowClient, str]:
    c = MlflowClient(tracking_uri=f"sqlite:///{cwd / 'outputs' / 'mlflow.db'}")
    return c, c.get_experiment_by_name("kvx").experiment_id


def ledger(cwd: Path) -> dict[str, list]:
    """Active runs by role; every cell's records, read back from its artifact."""
    c, exp = client(cwd)
    runs = c.search_runs([exp], "", max_results=1000)
    out: dict[str, list] = {}
    for run in runs:
        out.setdefault(run.data.tags.get("kvx.role", ""), []).append(run)
    return out


def check_exactly_once(cwd: Path, cells: int, sources: int) -> None:
    """Each cell has one FINISHED run holding each source once; no other cell or control run is left."""
    runs = ledger(cwd)
    cell_runs = runs.get("cell", [])
    assert [r.info.status for r in cell_runs] == ["FINISHED"] * cells, [r.info.status for r in cell_runs]
    assert len({r.data.tags["kvx.cell_id"] for r in cell_runs}) == cells  # no cell twice
    c, _ = client(cwd)
    for run in cell_runs:
        path = Path(c.download_artifacts(run.info.run_id, "records.jsonl", str(cwd / "dl" / run.info.run_id)))
        ids = [json.loads(line)["source_id"] for line in path.read_text().splitlines()]
        assert len(ids) == len(set(ids)) == sources, ids
    controls = runs.get("control", [])
    assert [r.info.status for r in controls] == ["FINISHED"] * len(controls)
    assert len({r.data.tags["kvx.control_key"] for r in controls}) == len(controls)


def aggregate_strict(cwd: Path) -> str:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvx.aggregate",
            "--no-plots",
            "--no-log",
            "--strict",
            "--out",
            str(cwd / "agg"),
        ],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return done.stdout + done.stderr


def wait_for_running_cell(cwd: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    """Until a cell run is RUNNING in the store (the worker is mid-cell)."""
    db = cwd / "outputs" / "mlflow.db"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        if db.exists():
            try:
                with sqlite3.connect(db, timeout=1) as con:
                    row = con.execute(
                        "select count(*) from runs r join tags t on t.run_uuid = r.run_uuid "
                        "where t.key = 'kvx.role' and t.value = 'cell' and r.status = 'RUNNING' "
                        "and r.lifecycle_stage = 'active'"
                    ).fetchone()
            except sqlite3.OperationalError:  # tables not created yet, or locked: look again
                row = (0,)
            if row[0]:
                time.sleep(1.0)  # into the cell's sources
                return
        time.sleep(0.2)
    raise AssertionError("no cell run started")


def test_two_identical_sweeps_started_together_compute_each_cell_once(tmp_path):
    procs = [start(tmp_path, *GRID) for _ in range(2)]
    results = [finish(p) for p in procs]
    for code, err in results:
        assert code == 0 and "Traceback" not in err, err[-3000:]
    check_exactly_once(tmp_path, cells=4, sources=3)
    assert "0 errors and 0 warnings" in aggregate_strict(tmp_path)


def test_eight_workers_on_sqlite_lose_and_duplicate_nothing(tmp_path):
    """Eight sweeps at once over four cells, each cell wanted by two of them."""
    cells = [("snapkv", "0.25"), ("snapkv", "0.5"), ("tova", "0.25"), ("tova", "0.5")]
    procs = [start(tmp_path, f"press={p}", f"ratio={r}", "n_sources=2") for p, r in cells * 2]
    results = [finish(p) for p in procs]
    failed = [err[-2000:] for code, err in results if code != 0 or "Traceback" in err]
    assert not failed, failed[0]
    check_exactly_once(tmp_path, cells=4, sources=2)
    assert "0 errors and 0 warnings" in aggregate_strict(tmp_path)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "ctrl-c"])
def test_a_sweep_stopped_mid_cell_resumes_and_supersedes_itself(tmp_path, sig):
    grid = ["press=snapkv", "ratio=0.25,0.5", "n_sources=40", "context_tokens=600", "max_new_tokens=16"]
    proc = start(tmp_path, *grid)
    wait_for_running_cell(tmp_path, proc)
    os.killpg(proc.pid, sig) if sig == signal.SIGKILL else proc.send_signal(sig)
    code, err = finish(proc, timeout=120)
    if sig == signal.SIGINT:  # one line says what was kept, no traceback
        assert code == 130 and "Traceback" not in err, err[-3000:]
        assert "kvx: interrupted;" in err and "rerun the same command to resume" in err
    else:
        assert code == -signal.SIGKILL
    left = ledger(tmp_path)
    assert any(r.info.status != "FINISHED" for r in left["cell"])  # a cell was cut off
    run_ok(tmp_path, *grid)
    check_exactly_once(tmp_path, cells=2, sources=40)
    sweeps = ledger(tmp_path)["sweep"]
    stopped = (
        "FAILED" if sig == signal.SIGINT else "KILLED"
    )  # Ctrl-C closes it; kill -9 leaves it to the rerun
    assert sorted(r.info.status for r in sweeps) == sorted(["FINISHED", stopped])
    assert "0 errors and 0 warnings" in aggregate_strict(tmp_path)


def test_a_full_disk_fails_the_cell_in_one_line_and_the_rerun_resumes(tmp_path):
    """MLflow's local artifact repository is made to raise ENOSPC (as a full disk does) from the
    second cell's records on; the rerun, with space back, finishes the grid."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import errno, os\n"
        "from mlflow.store.artifact import local_artifact_repo as repo\n"
        "real = repo.LocalArtifactRepository.log_artifact\n"
        "def log_artifact(self, local_file, artifact_path=None):\n"
        "    done = os.path.exists(os.environ['KVX_TEST_ONE_WRITE'])\n"
        "    if os.path.basename(local_file) == 'records.jsonl' and done:\n"
        "        raise OSError(errno.ENOSPC, 'No space left on device', local_file)\n"
        "    open(os.environ['KVX_TEST_ONE_WRITE'], 'a').close()\n"
        "    return real(self, local_file, artifact_path)\n"
        "repo.LocalArtifactRepository.log_artifact = log_artifact\n"
    )
    flag = tmp_path / "first-write-done"
    env = _env(PYTHONPATH=str(hook), KVX_TEST_ONE_WRITE=str(flag))
    code, err = finish(start(tmp_path, *GRID, env=env))
    assert code == 1 and "Traceback" not in err, err[-3000:]
    assert "kvx: disk full while writing" in err and "free space and rerun the same command" in err
    run_ok(tmp_path, *GRID)
    check_exactly_once(tmp_path, cells=4, sources=3)
    assert "0 errors and 0 warnings" in aggregate_strict(tmp_path)


def test_a_corrupt_control_file_is_set_aside_and_recomputed(tmp_path):
    run_ok(tmp_path, "press=snapkv", "ratio=0.5", "n_sources=3")
    files = sorted((tmp_path / "outputs" / "controls").rglob("*.json"))
    assert len(files) == 3
    files[0].write_text('{"output": "half a wri')  # a torn write from another tool or a bad copy
    files[1].write_bytes(b"\x00\xff\x00")
    err = run_ok(tmp_path, "press=snapkv", "ratio=0.25", "n_sources=3")
    assert err.count("moved to") == 2 and "recomputed" in err
    assert len(sorted((tmp_path / "outputs" / "controls").rglob("*.corrupt"))) == 2
    check_exactly_once(tmp_path, cells=2, sources=3)
    assert "0 errors and 0 warnings" in aggregate_strict(tmp_path)
