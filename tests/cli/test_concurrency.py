"""Several workers on one embedded store, and the faults a sweep must survive, tried as users meet them:
two identical sweeps started together, eight workers at once, kill -9 and Ctrl-C mid-cell, a full disk,
a corrupt control file. After each: 0 failures, 0 lost and 0 duplicated records, and the aggregate is
clean under ``--strict`` once the command is rerun."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from kvx.testing import cli
from kvx.testing.cli import aggregate_strict, finish, kvx_env, sweep
from kvx.testing.cli import start_sweep as start
from kvx.testing.stores import check_exactly_once, ledger

pytestmark = pytest.mark.slow
GRID = ["press=snapkv,tova", "ratio=0.25,0.5", "n_sources=3"]


def run_ok(cwd: Path, *args: str) -> str:
    """The same sweep run again, in-process (a rerun's subject is the store it finds, not its process):
    its log (Hydra writes the job log to stdout) and stderr."""
    done = sweep(cwd, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.stdout + done.stderr


def wait_for_running_cell(cwd: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    """Until a cell run is RUNNING in the store and a source of it is done (spooled): the worker is
    mid-cell, into its sources. Waiting on the spool, not a fixed time, keeps the cell short."""
    db = cwd / "outputs" / "mlflow.db"
    partial = cwd / "outputs" / "partial"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        if any(p.read_text().strip() for p in partial.glob("*.jsonl")) and db.exists():
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
def test_a_sweep_stopped_mid_cell_resumes_and_supersedes_itself(tmp_path, blank_store, sig):
    # six sources: the kill, a poll (0.2 s) after the first is spooled, lands with five still to go
    blank_store(tmp_path)
    grid = ["press=snapkv", "ratio=0.25,0.5", "n_sources=6", "context_tokens=600", "max_new_tokens=16"]
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
    (cut,) = left["sweep"]  # owned by the stopped process itself, so the rerun can tell it is dead
    assert cut.data.tags["kvx.owner"].split(":")[1] == str(proc.pid)
    run_ok(tmp_path, *grid)
    check_exactly_once(tmp_path, cells=2, sources=6)
    sweeps = ledger(tmp_path)["sweep"]
    # Ctrl-C closes it KILLED itself (as it does the cut cell); kill -9 leaves that to the rerun
    assert sorted(r.info.status for r in sweeps) == ["FINISHED", "KILLED"]
    assert "0 errors and 0 warnings" in aggregate_strict(tmp_path)


def test_a_full_disk_fails_the_cell_in_one_line_and_the_rerun_resumes(tmp_path, blank_store, monkeypatch):
    """MLflow's local artifact repository is made to raise ENOSPC (as a full disk does) from the
    second cell's records on; the rerun, with space back, finishes the grid."""
    import errno

    from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository

    blank_store(tmp_path)
    real, written = LocalArtifactRepository.log_artifact, []

    def log_artifact(self, local_file, artifact_path=None):
        if os.path.basename(local_file) == "records.jsonl" and written:
            raise OSError(errno.ENOSPC, "No space left on device", local_file)
        written.append(local_file)
        return real(self, local_file, artifact_path)

    grid = ["press=snapkv", "ratio=0.25,0.5", "n_sources=2"]
    with monkeypatch.context() as full:
        full.setattr(LocalArtifactRepository, "log_artifact", log_artifact)
        done = sweep(tmp_path, *grid)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "kvx: disk full while writing" in done.stderr
    assert "free space and rerun the same command" in done.stderr
    run_ok(tmp_path, *grid)
    check_exactly_once(tmp_path, cells=2, sources=2)
    assert "0 errors and 0 warnings" in aggregate_strict(tmp_path)


def test_a_corrupt_control_file_is_recomputed_and_a_copied_folder_reads_its_own_artifacts(
    tmp_path, blank_store
):
    """A control file that does not parse is set aside and recomputed. The store records absolute
    artifact paths, so a copy of the outputs folder must read its own artifacts, not the original's."""
    import shutil

    first, copy = tmp_path / "first", tmp_path / "copy"
    blank_store(first)
    run_ok(first, "press=snapkv", "ratio=0.5", "n_sources=3")
    files = sorted((first / "outputs" / "controls").rglob("*.json"))
    assert len(files) == 3
    files[0].write_text('{"output": "half a wri')  # a torn write from another tool or a bad copy
    files[1].write_bytes(b"\x00\xff\x00")
    err = run_ok(first, "press=snapkv", "ratio=0.25", "n_sources=3")
    assert err.count("moved to") == 2 and "recomputed" in err
    assert len(sorted((first / "outputs" / "controls").rglob("*.corrupt"))) == 2
    check_exactly_once(first, cells=2, sources=3)
    assert "0 errors and 0 warnings" in aggregate_strict(first)

    shutil.copytree(first / "outputs", copy / "outputs")
    shutil.rmtree(first / "outputs" / "mlartifacts")  # the original is gone: only the copy's remain
    assert "0 errors and 0 warnings" in aggregate_strict(copy)
    shutil.copytree(copy / "outputs" / "mlartifacts", first / "outputs" / "mlartifacts")
    shutil.rmtree(copy / "outputs" / "mlartifacts")  # only the original's: read, and said loudly
    done = cli.run("kvx.aggregate", ["--no-plots", "--no-log", "--out", str(copy / "agg")], copy, kvx_env())
    assert done.returncode == 0 and "artifact_location" in done.stdout + done.stderr, done.stdout[-2000:]
