"""From ``python -m kvx`` into ``python -m kvx.aggregate``: every setting of a sweep is its own matrix
row, with what varies as columns, and the aggregate finds nothing wrong (tiny reader, real CLI)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from kvx.testing import cli
from kvx.testing.cli import SOLO_LEASE, kvx_env

pytestmark = pytest.mark.slow
TINY = [
    "reader=tiny",
    "n_sources=3",
    "context_tokens=300",
    "max_new_tokens=4",
    "progress=false",
    "diagnostics=[]",
    *SOLO_LEASE,
]


def kvx(cwd: Path, *args: str) -> None:
    """``python -m kvx -m ARGS``, run in-process."""
    done = cli.run("kvx", ["-m", *args, *TINY], cwd, kvx_env())
    assert done.returncode == 0, done.stderr[-3000:]


def aggregate(cwd: Path, *args: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    out = cwd / "agg"
    done = cli.run("kvx.aggregate", ["--no-plots", "--no-log", "--out", str(out), *args], cwd, kvx_env())
    assert done.returncode == 0, done.stderr[-3000:]
    return pd.read_csv(out / "matrix.csv", keep_default_na=False), pd.read_csv(out / "problems.csv")


def compressed(matrix: pd.DataFrame) -> pd.DataFrame:
    return matrix[matrix["compressor"] != "FullCache"]


def cell_runs(cwd: Path) -> list:
    client = MlflowClient(tracking_uri=f"sqlite:///{cwd / 'outputs' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("kvx").experiment_id
    return client.search_runs([exp], "tags.`kvx.role` = 'cell'")


def test_press_fields_query_aware_and_setting_kinds_are_one_row_each(tmp_path, blank_store):
    blank_store(tmp_path)
    kvx(
        tmp_path,
        "press=snapkv",
        "press.window_size=16,32",
        "query_aware=false,true",
        "budget_tokens=null,100",
    )
    matrix, problems = aggregate(tmp_path)
    assert problems.empty, problems.to_string()
    rows = compressed(matrix)
    assert len(rows) == 8 and rows["compressor"].nunique() == 4 and set(rows["setting"]) == {"0.5", "100 tok"}
    assert {"press.window_size", "query_aware"} <= set(matrix.columns)
    assert sorted(rows["press.window_size"].astype(str).unique()) == ["16", "32"]
    assert (rows["n_sources"].astype(int) == 3).all() and (rows["n_supported"].astype(int) == 3).all()
    assert len({r.data.tags["kvx.cell_id"] for r in cell_runs(tmp_path)}) == 8
    run = cell_runs(tmp_path)[0]
    assert {"press.window_size", "setting.kind", "setting.value", "reader.seed"} <= set(run.data.params)


def test_the_query_aware_modes_are_three_cells_with_one_control(tmp_path, blank_store):
    blank_store(tmp_path)
    kvx(tmp_path, "press=snapkv", "press.window_size=16", "query_aware=false,true,prompt,question")
    matrix, problems = aggregate(tmp_path)
    assert problems.empty, problems.to_string()
    rows = compressed(matrix)  # true and prompt are one cell, run once
    assert sorted(rows["query_aware"].astype(str)) == ["False", "True", "question"]
    assert len({r.data.tags["kvx.cell_id"] for r in cell_runs(tmp_path)}) == 3
    assert len(list((tmp_path / "outputs" / "controls").rglob("*.json"))) == 3  # one per source, not per mode


def test_hqq_bit_widths_are_three_cells(tmp_path, blank_store):
    blank_store(tmp_path)
    kvx(tmp_path, "press=hqq", "press.bits=8,4,2", "press.group_size=16")
    matrix, problems = aggregate(tmp_path)
    assert problems.empty, problems.to_string()
    rows = compressed(matrix)
    assert sorted(rows["press.bits"].astype(str)) == ["2", "4", "8"] and (rows["setting"] == "-").all()


def test_two_reader_configurations_are_two_readers_with_their_own_controls(tmp_path, blank_store):
    blank_store(tmp_path)
    kvx(tmp_path, "reader.seed=0,1", "press=tova")
    matrix, problems = aggregate(tmp_path)
    assert problems.empty, problems.to_string()
    assert sorted(matrix["reader"].unique()) == ["tiny[seed=0]", "tiny[seed=1]"]
    assert len(matrix[matrix["compressor"] == "FullCache"]) == 2 and len(compressed(matrix)) == 2


def test_a_qualified_name_is_the_same_cell_and_is_reused(tmp_path, blank_store):
    blank_store(tmp_path)
    kvx(tmp_path, "press=tova", "ratio=0.25,0.5")
    kvx(tmp_path, "press=kvx:tova", "ratio=0.25,0.5")  # the same two cells: reused, not recomputed
    assert len(cell_runs(tmp_path)) == 2
    matrix, problems = aggregate(tmp_path)
    assert problems.empty, problems.to_string()
    assert len(compressed(matrix)) == 2 and set(matrix["compressor"]) == {"FullCache", "tova"}
    matrix, problems = aggregate(tmp_path, "--sweep", "latest")  # the reusing sweep alone is complete too
    assert problems.empty, problems.to_string()
    assert len(compressed(matrix)) == 2


def test_single_runs_plan_their_own_cells_and_a_sweep_its_jobs(tmp_path, blank_store):
    """Issue 39: ``python -m kvx``, then ``python -m kvx task=ruler_niah_multikey press=pyramidkv seed=1``
    aggregate clean under ``--strict`` (no cell crossed from the other's settings). A sweep that reuses
    the first cell and loses the run of its other planned cell is reported for that cell, and its export
    validates as the store (the reused cell is not missing there)."""
    blank_store(tmp_path)
    tiny = [a for a in TINY if not a.startswith("context_tokens=")] + [
        "context_tokens=500"
    ]  # multikey's least

    def run(*args: str) -> None:
        done = cli.run("kvx", [*args, *tiny], tmp_path, kvx_env())
        assert done.returncode == 0, done.stderr[-3000:]

    run()
    run("task=ruler_niah_multikey", "press=pyramidkv", "seed=1")
    strict = ["--no-plots", "--no-log", "--strict", "--out", str(tmp_path / "agg")]
    done = cli.run("kvx.aggregate", strict, tmp_path, kvx_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run("-m", "press=snapkv,pyramidkv")  # snapkv@0.5 of ruler_niah_single is the first run's: reused
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    lost = next(r for r in cell_runs(tmp_path) if r.data.tags.get("mlflow.parentRunId"))
    assert lost.info.run_name == "ruler_niah_single|tiny|pyramidkv@0.5|seed=0"
    client.delete_run(lost.info.run_id)
    _, problems = aggregate(tmp_path, "--export-records", str(tmp_path / "records"))
    assert list(problems["message"]) == [
        "the sweep planned 2 jobs; 1 finished cell runs were found",
        f"cell {lost.info.run_name} is missing",
    ]
    _, exported = aggregate(tmp_path, "--records", str(tmp_path / "records"))
    pd.testing.assert_frame_equal(exported, problems)
