"""Audit inputs from outside kvx runs: precomputed per-row, per-reader scores (ragscale's paired
score path), audited as kvx records are (``python -m kvx.aggregate --scores FILE``).

A scores file is CSV or JSONL with one row per (row, reader, compressor)::

    row_id, reader, compressor, raw_em, comp_em, raw_f1, comp_f1, [task], [family],
    [prompt_format], [artifact_sha256]

Every ``raw_<metric>``/``comp_<metric>`` pair is audited as ``<metric>``. ``artifact_sha256`` is
the compressed text each reader received: the same hash checks as for kvx records apply, so a
panel whose readers did not all get the identical artifact is refused. ``raw_answer``/``comp_answer``
are the answers scored (shown with the changed examples); any other column is a row hint
(``question_type``, ``difficulty``) the audit is sliced by unless ``--slice-by`` names others.

ragscale's own ``paired_scores.csv`` / ``records.jsonl`` are recognised by their columns and read as
they are (``kvx.aggregate.read.ragscale_scores``); ``--manifest artifact_manifest.jsonl`` checks their
artifact hashes.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import pandas as pd

from kvx.aggregate.catalogue import Catalogue, load
from kvx.aggregate.options import Options
from kvx.aggregate.ragscale.audit import AuditTables, Visit, audit, metrics, with_families
from kvx.aggregate.ragscale.controls import AuditControls
from kvx.aggregate.ragscale.settings import from_options
from kvx.aggregate.ragscale.tables import AuditRun
from kvx.aggregate.read.problems import Problem
from kvx.aggregate.read.ragscale_scores import (
    RagscaleScores,
    check_manifest,
    from_ragscale,
    is_ragscale,
    read_manifest,
)
from kvx.aggregate.read.sources import Source
from kvx.aggregate.run import PROBLEM_COLUMNS, Result, build_tables, select
from kvx.core.jsonl import JsonLineError, json_lines
from kvx.core.records import SUPPORTED

REQUIRED = ("row_id", "reader", "compressor")
ANSWERS = ("raw_answer", "comp_answer")  # optional: the answers behind the scores (changed examples)
LAYOUT = {*REQUIRED, "task", "family", "prompt_format", "artifact_sha256", *ANSWERS}
SHA256 = re.compile(r"^[0-9a-f]{64}$")


def score_metrics(frame: pd.DataFrame) -> list[str]:
    """The metrics of a scores file: each ``raw_<metric>`` with its ``comp_<metric>`` (not the answers)."""
    return [c[4:] for c in frame if c.startswith("raw_") and f"comp_{c[4:]}" in frame and c not in ANSWERS]


def read_scores(path: Path) -> pd.DataFrame:
    """The file as a table of strings and numbers; ValueError naming the file and what is wrong."""
    if not path.is_file():
        raise FileNotFoundError(f"--scores {path}: no such file")
    if path.suffix == ".csv":
        # answers and hints stay text ("1838" is an answer, not a number); scores parse round-trip exact
        text = (
            "row_id",
            "example_id",
            "reader",
            "artifact_sha256",
            *ANSWERS,
            "compressed_answer",
            "question_type",
        )
        frame = pd.read_csv(path, dtype=dict.fromkeys(text, str), float_precision="round_trip")
    else:
        try:  # lines end at \n only: an answer may hold U+2028, where splitlines() would cut a record
            frame = pd.DataFrame([row for _, row in json_lines(path)])
        except JsonLineError as exc:
            raise ValueError(f"--scores {path}: not JSON Lines ({exc})") from None
    if is_ragscale(frame):
        return frame
    missing = [c for c in REQUIRED if c not in frame]
    metrics = score_metrics(frame)
    if missing or not metrics:
        what = f"no column(s) {missing}" if missing else "no raw_<metric>/comp_<metric> column pair"
        raise ValueError(f"--scores {path}: {what}; it has {list(frame.columns)}")
    return frame


def hint_columns(frame: pd.DataFrame, metrics: list[str]) -> list[str]:
    """The row hints of a scores file: every column that is not its layout's (question_type, ...)."""
    scored = {f"{side}{m}" for m in metrics for side in ("raw_", "comp_")}
    return [c for c in frame.columns if c not in LAYOUT and c not in scored]


def score_rows(frame: pd.DataFrame, origin: str) -> tuple[pd.DataFrame, list[Problem]]:
    """Audit rows (the shape ``kvx.aggregate.ragscale.audit`` reads) and the problems found on the way."""
    problems: list[Problem] = []
    metrics = score_metrics(frame)
    task = frame["task"].astype(str) if "task" in frame else "imported"
    rows = pd.DataFrame(
        {
            "status": SUPPORTED,
            "task": task,
            "evidence": frame["compressor"].astype(str),
            "compressor": "text",
            "setting": "-",
            "reader": frame["reader"].astype(str),
            "revision": "",
            "family": frame["family"].astype(str) if "family" in frame else frame["reader"].astype(str),
            "prompt_format": frame["prompt_format"].astype(str) if "prompt_format" in frame else "",
            "row_id": frame["row_id"].astype(str),
            "text_hash": frame.get("artifact_sha256"),
        }
    )
    for metric in metrics:
        for prefix, side in (("full_m.", "raw_"), ("comp_m.", "comp_")):
            values = pd.to_numeric(frame[side + metric], errors="coerce")
            bad = values.isna() | ~values.map(lambda v: math.isfinite(v) if pd.notna(v) else False)
            for index in frame.index[bad]:
                problems.append(
                    Problem(
                        "score",
                        "warning",
                        origin,
                        str(frame.at[index, "row_id"]),
                        f"{side}{metric} of reader {frame.at[index, 'reader']} is not a finite number: "
                        "the row leaves that reader's audit",
                    )  # fmt: skip
                )
            rows[prefix + metric] = values.where(~bad)
    for column in hint_columns(frame, metrics):
        if column in rows:  # a hint may not overwrite what the audit reads (status, evidence, ...)
            message = f"column {column!r} is a name the audit uses: not read as a row hint"
            problems.append(Problem("score", "warning", origin, column, message))
            continue
        rows[column] = frame[column]
    for column in ANSWERS:
        if column in frame:
            rows[column] = frame[column]
    hashes = rows["text_hash"].dropna().astype(str)
    for index in hashes.index[~hashes.str.fullmatch(SHA256)]:
        problems.append(
            Problem(
                "artifact_hash",
                "error",
                origin,
                rows.at[index, "row_id"],
                f"artifact_sha256 {hashes[index]!r} is not a sha256 hex digest",
            )  # fmt: skip
        )
    key = ["task", "evidence", "reader", "row_id"]
    duplicated = rows.duplicated(key, keep=False)
    if duplicated.any():
        shown = rows[duplicated][key].drop_duplicates().head(3).to_dict("records")
        raise ValueError(
            f"{origin}: {int(duplicated.sum())} rows repeat a (task, compressor, reader, row): {shown}"
        )
    return rows, problems


class ScoresSource(Source):
    """What the report says it read: the scores files (no MLflow sweeps)."""

    def __init__(self, paths: list[Path]) -> None:
        super().__init__({"scores": ", ".join(map(str, paths))})


def _read(path: Path, manifests: list[pd.DataFrame]) -> tuple[pd.DataFrame, RagscaleScores | None]:
    frame = read_scores(path)
    if not is_ragscale(frame):
        return frame, None
    ragscale = from_ragscale(frame, str(path))
    for manifest in manifests:
        ragscale.problems += check_manifest(ragscale.frame, manifest, str(path))
    return ragscale.frame, ragscale


def _audit_by_metric(rows: pd.DataFrame, order: list[str], options: Options, visit: Visit) -> AuditTables:
    """ragscale's runner seeds the bootstrap of its i-th metric with seed + i (release ``runner.py``):
    a ragscale file's metrics are audited one at a time with those seeds, so its intervals are the
    release's; every other metric with the seed itself."""
    columns = metrics(rows)
    parts = []
    for metric in columns:
        others = [c for m, cols in columns.items() if m != metric for c in cols]
        seed = options.seed + (order.index(metric) if metric in order else 0)
        parts.append(
            audit(
                rows.drop(columns=others),
                options.pairs,
                options.n_splits,
                options.n_boot,
                seed,
                from_options(options),
                visit,
            )
        )
    problems = list({(p.check, p.key, p.message): p for part in parts for p in part.problems}.values())
    stacked = {
        name: pd.concat([part.tables()[name] for part in parts], ignore_index=True)
        for name in parts[0].tables()
    }
    return AuditTables(
        stacked["audit_readers"],
        stacked["audit_pairs"],
        stacked["audit_panel"],
        problems,
        stacked["audit_heldout"],
        stacked["audit_floor"],
        stacked["audit_swap_difference"],
    )


def audit_scores(
    paths: list[Path],
    options: Options,
    manifests: list[Path] | None = None,
    catalogue: Catalogue | None = None,
) -> Result:
    """The reader-upgrade audit of precomputed scores, as ``analyse`` returns it for records: the
    ragscale family's tables (``kvx.aggregate.ragscale.tables``) on the scores' audit, so each comparison
    has its outcome, slices by row hint and changed answers. A ragscale file
    (``kvx.aggregate.read.ragscale_scores``) also declares its current -> candidate pair, names its hint
    fields and is checked against each ``manifests`` artifact manifest."""
    catalogue = catalogue or load()
    names = [
        n for n in select(catalogue, options.only, options.skip) if catalogue.producer(n).family == "ragscale"
    ]
    listed = [read_manifest(path) for path in manifests or []]
    parts, problems, order, hints = [], [], [], []
    pairs = list(options.pairs)
    for path in paths:
        frame, ragscale = _read(path, listed)
        scored = score_metrics(frame)
        rows, found = score_rows(frame, str(path))
        parts.append(rows)
        problems += found
        if ragscale is None:
            hints += hint_columns(frame, scored)
            continue
        problems += ragscale.problems
        order += [m for m in ragscale.metrics if m not in order]
        hints += ragscale.hint_fields
        if ragscale.comparison and ragscale.comparison not in pairs:
            pairs.append(ragscale.comparison)
    rows = pd.concat(parts, ignore_index=True).sort_values(["task", "evidence", "reader", "row_id"])
    rows = with_families(rows.reset_index(drop=True), options.families)
    controls = AuditControls.from_options(options)
    audited = _audit_by_metric(rows, order, replace(options, pairs=pairs), controls.visit)
    given = {
        "audit_frame": rows,
        "audit_run": AuditRun(audited, controls),
        "slice_fields": options.slice_by if options.slice_by is not None else list(dict.fromkeys(hints)),
        "options": options,
        "problems": problems,
    }
    tables = build_tables(catalogue, names, given, options.workers or 1)
    tables["problems"] = pd.DataFrame([p.as_dict() for p in problems], columns=PROBLEM_COLUMNS)
    return Result(tables, problems, len(rows), len(rows))
