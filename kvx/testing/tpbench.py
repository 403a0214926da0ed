"""TPBench records crafted by hand, for the aggregate's TPBench tables with hand-computed answers.

``record`` builds one record of a probe (its cell a real TPBench cell's, its answers carrying every
metric and detail of the probe); ``write`` puts records in a folder as the app writes a cell, and
``tables`` aggregates them with ``FAST`` options (few splits, a fixed seed) so a test is quick and its
numbers repeat. ``row`` picks the one table row a test checks.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kvx.aggregate.options import Options
from kvx.aggregate.read.sources import DirectorySource
from kvx.aggregate.run import analyse
from kvx.core.identity import digest
from kvx.core.records import SUPPORTED, Answer, Record, dumps, validate

#: the aggregate's options for a TPBench test: few splits, enough bootstrap draws, a fixed seed
FAST = Options(n_splits=50, n_boot=400, seed=7, progress=False)
#: each probe's answer metrics
PROBE_METRICS = {
    "tpbench_p1": ("strict", "loose", "f1", "abstain", "parsed"),
    "tpbench_p2": ("strict", "loose", "superseded", "abstain", "parsed"),
    "tpbench_p3": ("strict", "loose", "goal", "value_strict", "value_loose", "segments_parsed")
    + ("whole_strict", "whole_loose", "abstain", "parsed"),
}


def answer(task: str, dialogue: str, strict: int, retained: bool = True, **metrics: float) -> Answer:
    """An answer with every metric of its probe (loose = strict, parsed, no abstention unless given)."""
    values = {m: float(strict) if m != "abstain" else 0.0 for m in PROBE_METRICS[task]}
    values |= {"parsed": 1.0, "superseded": 0.0} if task == "tpbench_p2" else {"parsed": 1.0}
    values |= metrics
    details: dict = {"dialogue_id": dialogue, "probe_set_sha256": "f" * 64, "turns_kept": 3, "turns_total": 9}
    if task == "tpbench_p1":
        details["reference_retained"] = retained
    else:
        details |= {"answer_retained": retained, "update_kept": retained, "update_position": 0.7}
    text = "right" if strict else "wrong"
    return Answer(text, text, float(strict), bool(strict), [1], "eos", values, details)


def record(
    task: str = "tpbench_p2",
    dialogue: str = "d0",
    seed: int = 42,
    selector: str | None = "recency",
    which: str | None = None,
    press: str = "none",
    ratio: float | None = None,
    full: int = 1,
    comp: int = 1,
    retained: bool = True,
    status: str = SUPPORTED,
    corpus: str = "sgd",
    press_fields: dict | None = None,
    **metrics: float,
) -> dict:
    """One TPBench record written the way the app writes it; its cell fields are a real cell's."""
    fields: dict = {
        "task": task,
        "task.corpus": corpus,
        "reader": "r",
        "press": press,
        **(press_fields or {}),
    }
    if selector is not None:
        fields |= {
            "transform": f"turns:{selector}",
            "transform.selector": selector,
            "transform.fraction": 0.3,
        }
    elif which is not None:
        fields |= {"transform": "delete_turns", "transform.which": which}
    else:
        fields["transform"] = "none"
    kind, value = ("ratio", ratio) if ratio is not None else ("none", None)
    fields |= {"setting.kind": kind, "setting.value": value, "seed": seed, "n_sources": 4}
    cell_id = digest(fields)
    source = f"{dialogue}/hotel-area@T5"
    r = Record(
        key=f"{task}/{source}/r@rev1/{cell_id}/seed={seed}",
        status=SUPPORTED,
        reason="",
        task=task,
        source_id=source,
        references=["north"],
        reader="r",
        model_revision="rev1",
        compressor=press,
        seed=seed,
        setting={
            "kind": kind,
            "value": value,
            "ratio": ratio or 0.0,
            "retained_share": 1.0,
            "method_parameter": {},
        },
        prompt_hash="0" * 64,
        n_context_tokens=10,
        n_question_tokens=2,
        config_hash="h",
        cell={"id": cell_id, "fields": fields},
        versions={},
        split=f"{task}|{corpus}|r|{seed}",
        full=answer(task, dialogue, full),
    )
    if status == SUPPORTED:
        r.pair(r.full, answer(task, dialogue, comp, retained, **metrics))
    else:
        r.fail(status, "no matched control turn")
    return r.to_dict()


def write(folder: Path, records: list[dict]) -> Path:
    """``records``, each validated first, as ``cells.jsonl`` in ``folder`` (made if absent); the folder,
    to read."""
    folder.mkdir(parents=True, exist_ok=True)
    for r in records:
        validate(r)
    (folder / "cells.jsonl").write_text(dumps(records))
    return folder


def tables(tmp_path: Path, records: list[dict]) -> dict[str, pd.DataFrame]:
    """The aggregate's tables of ``records``, written under ``tmp_path / "records"``."""
    return analyse(DirectorySource([write(tmp_path / "records", records)]), FAST).tables


def row(frame: pd.DataFrame, **where: object) -> pd.Series:
    """The one row of ``frame`` whose columns equal ``where``; fails unless exactly one matches."""
    hit = frame[(frame[list(where)] == pd.Series(where)).all(axis=1)]
    assert len(hit) == 1, f"{len(hit)} rows match {where}"
    return hit.iloc[0]
