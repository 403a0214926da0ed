"""Audit inputs from outside kvx runs: precomputed per-row, per-reader scores (ragscale's paired
score path), audited as kvx records are (``python -m kvx.aggregate --scores FILE``).

A scores file is CSV or JSONL with one row per (row, reader, compressor)::

    row_id, reader, compressor, raw_em, comp_em, raw_f1, comp_f1, [task], [family],
    [prompt_format], [artifact_sha256]

Every ``raw_<metric>``/``comp_<metric>`` pair is audited as ``<metric>``. ``artifact_sha256`` is
the compressed text each reader received: the same hash checks as for kvx records apply, so a
panel whose readers did not all get the identical artifact is refused.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd

from kvx.aggregate.read.problems import Problem
from kvx.aggregate.read.sources import Source
from kvx.aggregate.run import PROBLEM_COLUMNS, Options, Result, audit_controls

REQUIRED = ("row_id", "reader", "compressor")
SHA256 = re.compile(r"^[0-9a-f]{64}$")


def read_scores(path: Path) -> pd.DataFrame:
    """The file as a table of strings and numbers; ValueError naming the file and what is wrong."""
    if not path.is_file():
        raise FileNotFoundError(f"--scores {path}: no such file")
    if path.suffix == ".csv":
        frame = pd.read_csv(path, dtype={"row_id": str, "reader": str, "artifact_sha256": str})
    else:
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        try:
            frame = pd.DataFrame([json.loads(line) for line in lines])
        except json.JSONDecodeError as exc:
            raise ValueError(f"--scores {path}: not JSON Lines ({exc})") from None
    missing = [c for c in REQUIRED if c not in frame]
    metrics = [c[4:] for c in frame if c.startswith("raw_") and f"comp_{c[4:]}" in frame]
    if missing or not metrics:
        what = f"no column(s) {missing}" if missing else "no raw_<metric>/comp_<metric> column pair"
        raise ValueError(f"--scores {path}: {what}; it has {list(frame.columns)}")
    return frame


def score_rows(frame: pd.DataFrame, origin: str) -> tuple[pd.DataFrame, list[Problem]]:
    """Audit rows (the shape ``kvx.aggregate.analyse.audit`` reads) and the problems found on the way."""
    problems: list[Problem] = []
    metrics = [c[4:] for c in frame if c.startswith("raw_") and f"comp_{c[4:]}" in frame]
    task = frame["task"].astype(str) if "task" in frame else "imported"
    rows = pd.DataFrame(
        {
            "status": "supported",
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


def audit_scores(paths: list[Path], options: Options) -> Result:
    """The reader-upgrade audit of precomputed scores, as ``analyse`` returns it for records."""
    from kvx.aggregate.analyse.audit import audit, with_families
    from kvx.aggregate.analyse.audit_predictive import predictive_audit

    parts, problems = [], []
    for path in paths:
        rows, found = score_rows(read_scores(path), str(path))
        parts.append(rows)
        problems += found
    rows = pd.concat(parts, ignore_index=True).sort_values(["task", "evidence", "reader", "row_id"])
    rows = with_families(rows.reset_index(drop=True), options.families)
    controls = audit_controls(options)
    audited = audit(rows, options.pairs, options.n_splits, options.n_boot, options.seed, controls.visit)
    problems += audited.problems
    tables = {"audit_readers": audited.readers, "audit_pairs": audited.pairs, "audit_panel": audited.panel}
    tables |= controls.tables() | predictive_audit(
        audited.readers, audited.panel, options.n_boot, options.seed
    )
    tables["problems"] = pd.DataFrame([p.as_dict() for p in problems], columns=PROBLEM_COLUMNS)
    return Result(tables, problems, len(rows), len(rows))
