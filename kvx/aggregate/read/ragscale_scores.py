"""ragscale's own audit files as ``--scores`` input (release github.com/aimsresearchlab/ragscale,
``src/ragscale/reports.py`` ``write_outputs`` and ``replay.py`` ``REQUIRED_COLUMNS``).

``ragscale run`` writes one row per (example, reader, metric) to ``paired_scores.csv`` and the same
rows as JSON objects to ``records.jsonl``: ``example_id``, ``reader``, ``reader_key`` (current /
candidate), ``reader_family``, ``raw_score``, ``compressed_score``, ``metric``, ``candidate_pool_id``,
``compressed_artifact_hash`` (``sha256:<hex>`` of the compressed evidence every reader received),
``compressor_id``, ``dataset``, ``raw_answer``, ``compressed_answer``, ``question_type`` and one column
per configured hint field (e.g. ``difficulty``), besides latencies, costs and adapter metadata. Its
``artifact_manifest.jsonl`` has one line per example with the artifact's hash (and, when the run stored
it, the compressed text itself).

A file is read as ragscale's when it has ``example_id``, ``reader``, ``metric``, ``raw_score`` and
``compressed_score`` and no ``row_id``: it becomes kvx's scores layout (one row per example and reader,
``raw_<metric>``/``comp_<metric>`` per metric), keeping answers and hints for the audit's changed
examples and slices.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from kvx.aggregate.read.problems import Problem
from kvx.core.jsonl import JsonLineError, json_lines

KEYS = ("example_id", "reader", "metric", "raw_score", "compressed_score")
#: the columns ``ragscale run`` always writes (release runner/execute); any other is a configured hint
FIXED = {
    "example_id", "reader", "reader_key", "reader_family", "raw_score", "compressed_score",
    "candidate_pool_id", "compressed_artifact_hash", "compressor_id", "raw_policy_id", "metric",
    "dataset", "question", "reference_answers_json", "hints_json", "tags_json", "raw_answer",
    "compressed_answer", "artifact_reused", "raw_answer_reused", "compressed_answer_reused",
}  # fmt: skip
MEASURED = ("_ms", "_tokens", "_usd", "_json", "_reused")  # latencies, token counts, costs, metadata
HASH_PREFIX = "sha256:"


@dataclass
class RagscaleScores:
    """A ragscale file in kvx's scores layout and what the release's analysis takes from it."""

    frame: pd.DataFrame
    metrics: list[str]  # in the file's order: the release seeds metric i with seed + i
    hint_fields: list[str]  # question_type, then the configured hints in column order
    comparison: tuple[str, str] | None  # (current, candidate) reader names from reader_key
    problems: list[Problem] = field(default_factory=list)


def is_ragscale(frame: pd.DataFrame) -> bool:
    return all(key in frame for key in KEYS) and "row_id" not in frame


def _hint_fields(frame: pd.DataFrame) -> list[str]:
    extra = [c for c in frame.columns if c not in FIXED and c != "question_type" and not c.endswith(MEASURED)]
    return (["question_type"] if "question_type" in frame else []) + extra


def _comparison(frame: pd.DataFrame) -> tuple[str, str] | None:
    if "reader_key" not in frame:
        return None
    names = frame.groupby("reader_key")["reader"].agg(lambda s: sorted(set(s.astype(str))))
    if {"current", "candidate"} <= set(names.index) and len(names["current"]) == len(names["candidate"]) == 1:
        return names["current"][0], names["candidate"][0]
    return None


def from_ragscale(frame: pd.DataFrame, origin: str) -> RagscaleScores:
    """The wide scores table; ValueError naming the file when an (example, reader, metric) repeats."""
    frame = frame.assign(example_id=frame["example_id"].astype(str), reader=frame["reader"].astype(str))
    key = ["example_id", "reader", "metric"]
    repeated = frame.duplicated(key, keep=False)
    if repeated.any():
        shown = frame[repeated][key].drop_duplicates().head(3).to_dict("records")
        raise ValueError(
            f"{origin}: {int(repeated.sum())} rows repeat an (example_id, reader, metric): {shown}"
        )
    metrics = list(dict.fromkeys(frame["metric"].astype(str)))
    hints = _hint_fields(frame)
    per_row = [
        c for c in ("reader_family", "compressor_id", "dataset", "compressed_artifact_hash") if c in frame
    ]
    kept = [*per_row, "raw_answer", "compressed_answer", *hints]
    base = frame.drop_duplicates(["example_id", "reader"]).set_index(["example_id", "reader"])
    wide = base[[c for c in kept if c in base]].copy()
    for metric in metrics:
        scores = frame[frame["metric"].astype(str) == metric].set_index(["example_id", "reader"])
        wide[f"raw_{metric}"] = scores["raw_score"]
        wide[f"comp_{metric}"] = scores["compressed_score"]
    wide = wide.reset_index().rename(
        columns={
            "example_id": "row_id",
            "reader_family": "family",
            "compressor_id": "compressor",
            "dataset": "task",
            "compressed_answer": "comp_answer",
        }
    )
    if "compressor" not in wide:
        wide["compressor"] = "ragscale"
    if "compressed_artifact_hash" in wide:
        hashes = wide.pop("compressed_artifact_hash").astype("string")
        wide["artifact_sha256"] = hashes.str.removeprefix(HASH_PREFIX)
    problems = _pool_problems(frame, origin)
    return RagscaleScores(wide, metrics, hints, _comparison(frame), problems)


def _pool_problems(frame: pd.DataFrame, origin: str) -> list[Problem]:
    """The release refuses a panel whose readers saw different candidate pools for one example."""
    if "candidate_pool_id" not in frame:
        return []
    counts = frame.groupby("example_id")["candidate_pool_id"].nunique(dropna=False)
    return [
        Problem("artifact_hash", "error", origin, str(example), "candidate_pool_id differs across readers")
        for example in counts.index[counts > 1]
    ]


def read_manifest(path: Path) -> pd.DataFrame:
    """``artifact_manifest.jsonl``: one object per example; ValueError naming the file and line."""
    if not path.is_file():
        raise FileNotFoundError(f"--manifest {path}: no such file")
    try:  # lines end at \n only: a summary may hold U+2028, where splitlines() would cut a record
        rows = [row for _, row in json_lines(path)]
    except JsonLineError as exc:
        raise ValueError(f"--manifest {path}: line {exc.line} is not JSON ({exc.reason})") from None
    frame = pd.DataFrame(rows)
    if "example_id" not in frame or "compressed_artifact_hash" not in frame:
        raise ValueError(
            f"--manifest {path}: needs example_id and compressed_artifact_hash; has {list(frame)}"
        )
    return frame.assign(example_id=frame["example_id"].astype(str))


def check_manifest(scores: pd.DataFrame, manifest: pd.DataFrame, origin: str) -> list[Problem]:
    """Each example's artifact hash in the scores against the manifest's, and the manifest's stored
    compressed text against its own hash (the release's ``digest``: sha256 of the UTF-8 text)."""
    problems = []
    listed = manifest.drop_duplicates("example_id").set_index("example_id")
    for row_id, hashes in scores.groupby("row_id")["artifact_sha256"]:
        if row_id not in listed.index:
            problems.append(Problem("artifact_hash", "error", origin, row_id, "not in the artifact manifest"))
            continue
        expected = str(listed.at[row_id, "compressed_artifact_hash"]).removeprefix(HASH_PREFIX)
        seen = sorted(set(hashes.dropna().astype(str)))
        if seen != [expected]:
            problems.append(
                Problem(
                    "artifact_hash",
                    "error",
                    origin,
                    row_id,
                    f"artifact hash {', '.join(h[:12] for h in seen) or 'missing'} is not the manifest's "
                    f"{expected[:12]}",
                )  # fmt: skip
            )
    if "compressed_evidence" in listed:
        for row_id, entry in listed.iterrows():
            text = entry["compressed_evidence"]
            if not isinstance(text, str):
                continue
            actual = hashlib.sha256(text.encode("utf-8")).hexdigest()
            if HASH_PREFIX + actual != str(entry["compressed_artifact_hash"]):
                problems.append(
                    Problem(
                        "artifact_hash",
                        "error",
                        origin,
                        str(row_id),
                        f"the manifest's compressed_evidence hashes to {actual[:12]}, not its "
                        f"compressed_artifact_hash",
                    )  # fmt: skip
                )
    return problems
