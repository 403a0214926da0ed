"""Expected cells are what a sweep planned, and an exported store validates as the store did.

Stores are written in-process the way ``python -m kvx`` writes them (``kvx.testing.synthetic``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
from mlflow.tracking import MlflowClient

from kvx.aggregate.options import Options
from kvx.aggregate.read import sources
from kvx.aggregate.read.sources import DirectorySource, MlflowSource
from kvx.aggregate.run import analyse
from kvx.stores import tracking
from kvx.testing.synthetic import Grid, cell_records, log_cell, log_controls, log_sweep

FAST = Options(n_splits=50, n_boot=50, seed=1, progress=False, workers=1)


def _store(tmp_path: Path, blank_store) -> tuple[str, MlflowClient, str]:
    blank_store(tmp_path)
    uri = f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    return uri, client, client.create_experiment("kvx", (tmp_path / "outputs" / "mlruns").as_uri())


def _expected(uri: str) -> list[str]:
    return [
        p.message for p in analyse(MlflowSource(uri, ["kvx"]), FAST).problems if p.check == "expected_cells"
    ]


def _cell_run(client: MlflowClient, exp: str, sweep: str, name: str) -> str:
    runs = client.search_runs([exp], f"tags.`{tracking.MLFLOW_PARENT}` = '{sweep}'")
    return next(r.info.run_id for r in runs if r.info.run_name == name)


def test_unrelated_single_runs_are_not_crossed_into_cells(tmp_path, blank_store) -> None:
    """``python -m kvx`` then ``python -m kvx task=ruler_niah_multikey press=pyramidkv seed=1``: each
    run plans its own cell, so neither lacks the other's task, compressor or seed."""
    uri, client, exp = _store(tmp_path, blank_store)
    for task, press, seed in (("ruler_niah_single", "snapkv", 0), ("ruler_niah_multikey", "pyramidkv", 1)):
        records = cell_records(
            Grid(tasks=(task,), compressors=(press,), n_sources=2, seed=seed), task, "tiny", press, 0.5
        )
        log_cell(client, exp, f"{task}|tiny|{press}@0.5|seed={seed}", records)
        log_controls(client, exp, f"{task}|tiny|FullCache", records)
    assert analyse(MlflowSource(uri, ["kvx"]), FAST).problems == []


def test_a_planned_cell_missing_from_a_sweep_is_reported(tmp_path, blank_store) -> None:
    """The sweep planned tova@0.5, whose run is gone: the plan names it, though no record shows tova."""
    uri, client, exp = _store(tmp_path, blank_store)
    sweep = log_sweep(uri, Grid(compressors=("snapkv", "tova"), ratios=(0.5,), n_sources=3))
    client.delete_run(_cell_run(client, exp, sweep, "ruler_niah_single|smollm2|tova@0.5"))
    assert _expected(uri) == [
        "the sweep planned 2 jobs; 1 finished cell runs were found",
        "cell ruler_niah_single|smollm2|tova@0.5 is missing",  # which one: only the plan knows
    ]


def test_a_planned_cell_lacking_sources_is_reported(tmp_path, blank_store) -> None:
    uri, client, exp = _store(tmp_path, blank_store)
    grid = Grid(compressors=("snapkv", "tova"), ratios=(0.5,), n_sources=3)
    sweep = client.create_run(exp, tags={tracking.ROLE: "sweep", tracking.PLANNED_JOBS: "2"}).info.run_id
    for press in grid.compressors:
        records = cell_records(grid, "ruler_niah_single", "smollm2", press, 0.5)
        name = f"ruler_niah_single|smollm2|{press}@0.5"
        client.set_tag(sweep, f"{tracking.PLAN}{records[0]['cell']['id']}", name)
        log_cell(client, exp, name, records if press == "snapkv" else records[:2], sweep)
    client.set_terminated(sweep, "FINISHED")
    message = "cell ruler_niah_single x smollm2 x seed 0 x tova@0.5 lacks 1 sources: ruler_niah_single_000002"
    assert _expected(uri) == [message]


def test_a_sweep_an_earlier_kvx_logged_is_checked_by_the_product_of_its_axes(tmp_path, blank_store) -> None:
    """No plan recorded: the product of the axes its records show is its plan, as before plans."""
    uri, client, exp = _store(tmp_path, blank_store)
    sweep = log_sweep(uri, Grid(n_sources=3), plan=False)
    client.delete_run(_cell_run(client, exp, sweep, "ruler_niah_single|smollm2|snapkv@0.25"))
    assert _expected(uri)[1:] == ["cell ruler_niah_single x smollm2 x seed 0 x snapkv@0.25 is missing"]


def _reusing_store(tmp_path: Path, blank_store) -> str:
    """Sweep A runs snapkv@0.5; sweep B plans snapkv,tova x 0.25,0.5 and reuses A's snapkv@0.5. A's
    control group has a second ledger (a later cell's supplement), B's tova@0.5 logged a count its
    records do not give, and B's tova@0.25 failed."""
    uri, client, exp = _store(tmp_path, blank_store)
    grid = Grid(compressors=("snapkv", "tova"), n_sources=3)
    a = log_sweep(uri, Grid(compressors=("snapkv",), ratios=(0.5,), n_sources=3))
    first = cell_records(grid, "ruler_niah_single", "smollm2", "snapkv", 0.5)
    log_controls(client, exp, "ruler_niah_single|smollm2|FullCache (+1)", first[2:], a)
    b = client.create_run(exp, tags={tracking.ROLE: "sweep", tracking.PLANNED_JOBS: "4"}).info.run_id
    reused = first[0]["cell"]["id"]
    client.set_tag(b, f"{tracking.PLAN}{reused}", "ruler_niah_single|smollm2|snapkv@0.5")
    client.set_tag(
        b, f"{tracking.REUSED}{reused}", _cell_run(client, exp, a, "ruler_niah_single|smollm2|snapkv@0.5")
    )
    for press, ratio, status, logged in (
        ("snapkv", 0.25, "FINISHED", None),
        ("tova", 0.5, "FINISHED", {"n_records": 3, "n_cw": 99}),
        ("tova", 0.25, "FAILED", None),
    ):
        records = cell_records(grid, "ruler_niah_single", "smollm2", press, ratio)
        name = f"ruler_niah_single|smollm2|{press}@{ratio}"
        client.set_tag(b, f"{tracking.PLAN}{records[0]['cell']['id']}", name)
        log_cell(client, exp, name, records, b, status, logged)
    client.set_terminated(b, "FINISHED")
    return uri


def test_an_exported_store_with_a_reused_cell_validates_as_the_store(tmp_path, blank_store) -> None:
    """Export, then import: the same tables and the same problems, located alike (the run, the sweep)."""
    uri = _reusing_store(tmp_path, blank_store)
    store = analyse(MlflowSource(uri, ["kvx"]), replace(FAST, export=tmp_path / "r"))
    exported = analyse(DirectorySource([tmp_path / "r"]), FAST)
    expected = [[p.message for p in r.problems if p.check == "expected_cells"] for r in (store, exported)]
    assert expected[1] == expected[0]  # no snapkv@0.5 missing from B: the export knows B reused it
    assert [p.as_dict() for p in exported.problems] == [p.as_dict() for p in store.problems]
    checks = sorted(p.check for p in store.problems)
    assert checks == ["counts", "expected_cells", "expected_cells", "unfinished_run"]  # B's tova@0.25, both
    assert exported.tables.keys() == store.tables.keys()
    for name, table in store.tables.items():
        pd.testing.assert_frame_equal(exported.tables[name], table, obj=name)
    assert (exported.n_records, exported.n_rows) == (store.n_records, store.n_rows)


def test_an_export_without_its_manifest_is_read_folder_by_folder(tmp_path, blank_store) -> None:
    """Without the manifest (an export by an earlier kvx) the records and both ledgers are read as
    before, each folder a sweep checked by the product of its axes; what only the store knew (plans,
    reuse, logged counts, unfinished runs) is not there to check by."""
    uri = _reusing_store(tmp_path, blank_store)
    store = analyse(MlflowSource(uri, ["kvx"]), replace(FAST, export=tmp_path / "r"))
    (tmp_path / "r" / sources.MANIFEST).unlink()
    exported = analyse(DirectorySource([tmp_path / "r"]), FAST)
    assert exported.n_rows == store.n_rows
    assert [p.message for p in exported.problems] == [  # B's folder lacks the cell B reused
        f"cell ruler_niah_single x smollm2 x seed 0 x {cell} is missing"
        for cell in ("snapkv@0.5", "tova@0.25")
    ]
    pd.testing.assert_frame_equal(exported.tables["matrix"], store.tables["matrix"])


def test_a_cell_run_the_store_cannot_read_is_reported_by_its_export_too(tmp_path, blank_store) -> None:
    uri, client, exp = _store(tmp_path, blank_store)
    sweep = log_sweep(uri, Grid(compressors=("snapkv",), ratios=(0.5,), n_sources=2))
    run = client.get_run(_cell_run(client, exp, sweep, "ruler_niah_single|smollm2|snapkv@0.5"))
    artifacts = Path(run.info.artifact_uri.removeprefix("file://"))
    (artifacts / "records.jsonl").write_bytes(b'{"key": "\xff"}\n')  # not UTF-8
    store = analyse(MlflowSource(uri, ["kvx"]), replace(FAST, export=tmp_path / "r"))
    exported = analyse(DirectorySource([tmp_path / "r"]), FAST)
    assert [p.as_dict() for p in exported.problems] == [p.as_dict() for p in store.problems]
    assert [(p.check, p.run) for p in store.problems][:1] == [("parse", run.info.run_id)]
