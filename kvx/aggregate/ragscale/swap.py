"""Evidence swaps for the reader-upgrade audit: one evidence condition against another, both from
kvx records (``python -m kvx.aggregate --swap bm25_top_k:dense_top_k``). A retriever swap keeps the
pool and reorders it, so it changes evidence without compressing it: a control for how much any
evidence change moves a reader comparison.
"""

from __future__ import annotations

import pandas as pd

from kvx.aggregate.read.problems import Problem
from kvx.core.records import SUPPORTED


def swapped(rows: pd.DataFrame, before: str, after: str) -> tuple[pd.DataFrame, list[Problem]]:
    """Audit rows where "raw" is each reader's answer under evidence ``before`` and "compressed" its
    answer under ``after`` (a retriever swap: BM25 vs dense ranking of the same pool), on the rows
    both conditions answered. Conditions are evidence labels or, when unambiguous, transform names."""
    a, b = _condition(rows, before), _condition(rows, after)
    problems = [
        Problem("swap", "warning", "", f"{before}:{after}", why) for why in (a, b) if why.startswith("no ")
    ]
    if problems:
        return rows.iloc[0:0], problems
    key = ["task", "compressor", "setting", "reader", "revision", "row_id"]
    comp_cols = [c for c in rows if c.startswith("comp_")]
    left = rows[rows["evidence"] == a][[*key, "family", "prompt_format", "status", "text_hash", *comp_cols]]
    left = left.rename(columns={c: "full_" + c[5:] for c in comp_cols} | {"text_hash": "hash_before"})
    right = rows[rows["evidence"] == b][[*key, "status", "text_hash", *comp_cols]]
    both = left.merge(right, on=key, suffixes=("_before", ""))
    if both.empty:  # e.g. a transform swept as a cell field labels each condition's compressors apart
        shown = ", ".join(
            f"{side}: {sorted(set(frame['compressor']))[:3]}" for side, frame in ((a, left), (b, right))
        )
        why = f"the two conditions share no (task, compressor, setting, reader, row) to pair ({shown})"
        return rows.iloc[0:0], [Problem("swap", "warning", "", f"{before}:{after}", why)]
    both["status"] = both["status"].where(both["status_before"] == SUPPORTED, both["status_before"])
    pair = both["hash_before"].fillna("") + "|" + both["text_hash"].fillna("")
    both["text_hash"] = pair.where(pair != "|")  # KV-only conditions: no text artifact on either side
    both["evidence"] = f"{a} -> {b}"
    return both.drop(columns=["status_before", "hash_before"]), []


def _condition(rows: pd.DataFrame, name: str) -> str:
    """The evidence label ``name`` means, or a sentence saying why there is none."""
    labels = set(rows["evidence"])
    if name in labels:
        return name
    matches = sorted(set(rows.loc[rows["transform"] == name, "evidence"])) if "transform" in rows else []
    if len(matches) == 1:
        return matches[0]
    if matches:
        return f"no single condition: {name} names {matches}; give the full label"
    return f"no condition {name!r}; the records have {sorted(labels)}"
