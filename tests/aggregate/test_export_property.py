"""Property: a store read directly and the same store exported then read as a record directory give the
same rows and the same problems, and neither drops, merges or invents a record.

Random stores are written the way ``python -m kvx`` writes them (``kvx.testing.synthetic``): several
sweeps, some recorded without a plan (an earlier kvx), some killed and resumed by a later sweep of the
same grid, cells reused from earlier sweeps, failed cell runs recomputed later, single runs outside any
sweep, supplementary control ledgers, logged counts that disagree, every record status, and answers of
arbitrary Unicode (U+2028 included). No model runs: an example takes a fraction of a second.
"""

from __future__ import annotations

import hashlib
import itertools
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from mlflow.tracking import MlflowClient

from kvx.aggregate.options import Options
from kvx.aggregate.read.sources import DirectorySource, MlflowSource
from kvx.aggregate.run import validate
from kvx.core.records import Answer
from kvx.stores import tracking
from kvx.testing.synthetic import log_cell, log_controls, ratio_record

FAST = Options(n_splits=50, n_boot=50, seed=1, progress=False, workers=1)
CELLS = list(itertools.product(("t1", "t2"), ("snapkv", "tova"), (0.25, 0.5)))  # task, press, ratio
SOURCES = ("s0", "s1", "s2")
STATUSES = ("supported", "unsupported", "error")  # every status of kvx.core.records.Record
SPECIAL = ["", "\u2028", "a\u2028b", "\u2029", "\r\n", "\x85", '"\\', "\ud7ff\U0010ffff"]
NUL = ["a", "a\x00b", "a\x00c", "\x00"]  # distinct texts a NUL-truncating hash takes for one


def texts(nul: bool) -> st.SearchStrategy[str]:
    """Any text without surrogates (JSON cannot hold them unpaired), NUL only when asked."""
    chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="" if nul else "\x00")
    drawn = st.text(chars, max_size=8) | st.sampled_from(SPECIAL)
    return st.sampled_from(NUL) | drawn if nul else drawn


@dataclass
class Run:
    """One cell run to write: its cell, its records' drawn contents, how it ended."""

    cell: int
    sources: list[tuple[str, str, bool, str]]  # source, status, compressed correct, compressed text
    status: str = "FINISHED"
    miscount: bool = False


@dataclass
class Sweep:
    cells: list[int]
    plan: bool
    status: str
    same_grid: bool  # the grid of the sweep before it: a rerun that supersedes it when it was not finished
    extra_jobs: int
    runs: list[Run] = field(default_factory=list)


@st.composite
def stores(draw: st.DrawFn, nul: bool) -> tuple[dict, list[Sweep], list[Run]]:
    text = texts(nul)
    full = {(t, s): (draw(text), draw(st.booleans())) for t in ("t1", "t2") for s in SOURCES}

    def run() -> Run:
        cell = draw(st.sampled_from(range(len(CELLS))))
        chosen = draw(st.lists(st.sampled_from(SOURCES), min_size=1, max_size=3, unique=True))
        rows = [(s, draw(st.sampled_from(STATUSES)), draw(st.booleans()), draw(text)) for s in chosen]
        status = draw(st.sampled_from(["FINISHED", "FINISHED", "FINISHED", "FAILED"]))
        return Run(cell, rows, status, draw(st.integers(0, 5)) == 0)

    sweeps = []
    for _ in range(draw(st.integers(1, 3))):
        sweep = Sweep(
            draw(st.lists(st.sampled_from(range(len(CELLS))), min_size=1, max_size=4, unique=True)),
            draw(st.integers(0, 3)) > 0,
            draw(st.sampled_from(["FINISHED", "FINISHED", "KILLED", "RUNNING"])),
            draw(st.booleans()),
            draw(st.integers(0, 1)),
        )
        for cell in sweep.cells:
            drawn = run()
            sweep.runs.append(replace(drawn, cell=cell))
        sweeps.append(sweep)
    singles = [run() for _ in range(draw(st.integers(0, 2)))]
    return full, sweeps, singles


def _answer(text: str, ok: bool) -> Answer:
    return Answer(text, text.lower(), 1.0 if ok else 0.0, ok, [1], "eos")


def _records(run: Run, full: dict) -> list[dict]:
    task, press, ratio = CELLS[run.cell]
    out = []
    for source, status, ok, text in run.sources:
        control = _answer(*full[(task, source)])
        r = ratio_record(
            task,
            source,
            "r",
            press,
            ratio,
            references=["yes"],
            split=f"{task}|r",
            prompt_hash=hashlib.sha256(f"{task}|{source}".encode()).hexdigest(),
            n_context_tokens=10,
            n_question_tokens=2,
            config_hash="h",
            versions={},
            full=control,
        )
        if status == "supported":
            r.pair(control, _answer(text, ok))
        else:  # an empty reason breaks the schema: that problem must survive the export as well
            r.fail(status, text)
        out.append(r.to_dict())
    return out


def write(uri: str, experiment: str, full: dict, sweeps: list[Sweep], singles: list[Run]) -> dict[str, dict]:
    """The store as ``python -m kvx`` leaves it; returns the records of every finished cell run by key."""
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment(
        experiment, (Path(uri.removeprefix("sqlite:///")).parent / experiment).as_uri()
    )
    finished: dict[int, str] = {}  # cell -> the finished run that holds it
    ledgers: dict[str, set[str]] = {}  # split -> sources its ledgers hold
    kept: dict[str, dict] = {}

    def cell_run(run: Run, sweep: str | None, plan: bool = False) -> None:
        records = _records(run, full)
        task, press, ratio = CELLS[run.cell]
        name = f"{task}|r|{press}@{ratio}"
        if plan:  # an earlier kvx's sweep has none
            client.set_tag(sweep, f"{tracking.PLAN}{records[0]['cell']['id']}", name)
        if run.cell in finished:  # a finished cell is reused, never run twice
            if sweep is not None:
                client.set_tag(sweep, f"{tracking.REUSED}{records[0]['cell']['id']}", finished[run.cell])
            return
        logged = {"n_records": len(records) + 1} if run.miscount else None
        run_id = log_cell(client, exp, name, records, sweep, run.status, logged)
        if run.status != "FINISHED":
            return
        finished[run.cell] = run_id
        kept.update((r["key"], r) for r in records)
        have = ledgers.setdefault(records[0]["split"], set())
        new = [r for r in records if r["source_id"] not in have]
        if new:  # the group's first ledger, or one more holding the sources it lacks
            log_controls(client, exp, f"{task}|r|FullCache", new, sweep)
            have.update(r["source_id"] for r in new)

    grid = "g0"
    for i, sweep in enumerate(sweeps):
        grid = grid if sweep.same_grid else f"g{i + 1}"
        planned = str(len(sweep.cells) + sweep.extra_jobs)
        tags = {tracking.ROLE: "sweep", tracking.PLANNED_JOBS: planned, tracking.GRID: grid}
        sweep_id = client.create_run(exp, run_name=f"sweep {i}", tags=tags).info.run_id
        for run in sweep.runs:
            cell_run(run, sweep_id, sweep.plan)
        if sweep.status != "RUNNING":
            client.set_terminated(sweep_id, sweep.status)
    for run in singles:
        cell_run(run, None)
    return kept


def roundtrip(root: Path, full: dict, sweeps: list[Sweep], singles: list[Run]) -> None:
    experiment = uuid.uuid4().hex  # one store, an experiment per example
    uri = f"sqlite:///{root / 'outputs' / 'mlflow.db'}"
    kept = write(uri, experiment, full, sweeps, singles)
    out = root / f"{experiment}-records"
    source = MlflowSource(uri, [experiment])
    store_rows, store, _ = validate(source, replace(FAST, export=out))
    for what, seen in (("reused", source.reused), ("superseded", source.superseded), ("plans", source.plans)):
        event(f"store has {what}: {bool(seen)}")
    for check in sorted({p.check for p in store.problems}):
        event(f"problem {check}")
    dir_rows, exported, _ = validate(DirectorySource([out]), FAST)
    assert [p.as_dict() for p in exported.problems] == [p.as_dict() for p in store.problems]
    pd.testing.assert_frame_equal(dir_rows.reset_index(drop=True), store_rows.reset_index(drop=True))
    assert exported.ledger == store.ledger
    assert exported.n_records == store.n_records == len(kept)  # nothing dropped
    columns = [store_rows.get(c, pd.Series(dtype=object)) for c in ("key", "full_output", "status")]
    for key, output, status in zip(*columns, strict=True):
        assert (output, status) == (
            kept[key]["full"]["output"],
            kept[key]["status"],
        )  # nothing merged, invented


@pytest.mark.slow
@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(stores(nul=True))
def test_export_then_import_keeps_every_record_and_problem(tmp_path, blank_store, drawn) -> None:
    if not (tmp_path / "outputs").exists():
        blank_store(tmp_path)
    roundtrip(tmp_path, *drawn)
