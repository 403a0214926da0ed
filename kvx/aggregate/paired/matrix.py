"""The result matrix, failure sets and category counts (KVDiagnosis section 3.3, Tables 4 and 11).

Quality and the C→W rate come first, over every supported source of a cell; failure sets
F = {FullCache-correct and compressed-wrong} are extracted only from the complete matrix, and
diagnostic means are taken over F ∩ A (rows where that diagnostic is valid), with the count.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kvx.aggregate.paired.judges import judge_columns, judge_names, with_judged
from kvx.aggregate.read.rows import Metric
from kvx.core.records import CC, CELL, CW, ERROR, SUPPORTED, TASK_READER, UNSUPPORTED, WC, WW
from kvx.diagnostics.categories import CATEGORIES

TRANSITION_COUNTS = {"n_cc": CC, "n_cw": CW, "n_wc": WC, "n_ww": WW}
UNCATEGORIZED = "not_categorized"  # C→W rows without diagnostics in a cell where others have them
NO_DIAGNOSTICS = "N/A"  # a cell none of whose C→W rows has a diagnostic: no category, no share
POOLED = "pooled"


def _ratio(num: pd.Series | float, den: pd.Series | float) -> pd.Series | float:
    """num / den, NaN where the denominator is 0 (an empty denominator is N/A, not 0%)."""
    if isinstance(den, pd.Series):
        return num / den.where(den > 0)
    return num / den if den else np.nan


def _cell_counts(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    sup = rows["status"] == SUPPORTED
    frame = pd.DataFrame(
        {
            **{k: rows[k] for k in keys},
            "n_sources": 1,
            "n_supported": sup.astype(int),
            "n_unsupported": (rows["status"] == UNSUPPORTED).astype(int),
            "n_error": (rows["status"] == ERROR).astype(int),
            "score_sum": rows["comp_score"].where(sup, 0.0),
            "correct_sum": rows["comp_correct"].where(sup, 0.0),
            **{name: (rows["transition"] == t).astype(int) for name, t in TRANSITION_COUNTS.items()},
        }
    )
    out = frame.groupby(keys, sort=True).sum().reset_index()
    out["quality"] = _ratio(out.pop("score_sum"), out["n_supported"])
    out["accuracy"] = _ratio(out.pop("correct_sum"), out["n_supported"])
    out["n_fc"] = out["n_cc"] + out["n_cw"]
    out["cw_rate"] = _ratio(out["n_cw"], out["n_fc"])
    out = with_judged(out, rows, keys, "compressed")
    return _with_metric_means(out, rows[sup], keys, "comp_m.")


def metric_names(rows: pd.DataFrame) -> list[str]:
    """The answer metrics (``Score.metrics``) any row carries, from its ``comp_m.``/``full_m.`` columns."""
    prefixes = ("comp_m.", "full_m.")
    return sorted({c.split(".", 1)[1] for c in rows.columns if c.startswith(prefixes)})


def metric_columns(rows: pd.DataFrame) -> list[str]:
    """The answer-metric columns of ``rows`` (what the matrix reads besides its own)."""
    return [c for c in rows.columns if c.startswith(("comp_m.", "full_m."))]


def _with_metric_means(
    out: pd.DataFrame, answers: pd.DataFrame, keys: list[str], prefix: str
) -> pd.DataFrame:
    """``m.<name>``: the mean of each answer metric over ``answers`` that carry it, ``m.<name>_n`` how
    many; a group none of whose answers carries it is NaN with 0, never 0 (cell rows read the supported
    compressed answers, FullCache rows their controls)."""
    for name in metric_names(answers):
        column = f"{prefix}{name}"
        if column not in answers:
            out[f"m.{name}"], out[f"m.{name}_n"] = np.nan, 0
            continue
        stats = answers.groupby(keys, sort=True)[column].agg(["mean", "count"])
        stats.columns = [f"m.{name}", f"m.{name}_n"]
        out = out.merge(stats.reset_index(), on=keys, how="left")
        out[f"m.{name}_n"] = out[f"m.{name}_n"].fillna(0).astype(int)
    return out


def controls(rows: pd.DataFrame) -> pd.DataFrame:
    """One FullCache control per source (the same answer in every cell): each source's first row with one."""
    return rows.dropna(subset=["full_correct"]).drop_duplicates("unit")


def _fullcache(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    out = (
        controls(rows)
        .groupby(keys, sort=True)
        .agg(
            n_sources=("unit", "size"),
            quality=("full_score", "mean"),
            accuracy=("full_correct", "mean"),
            n_fc=("full_correct", "sum"),
        )
    )
    out = out.reset_index()
    out["compressor"], out["setting"] = "FullCache", ""
    out["n_fc"] = out["n_fc"].astype(int)
    out = with_judged(out, rows, keys, "FullCache")
    return _with_metric_means(out, controls(rows), keys, "full_m.")


#: what a family pool keys on: the family and the context length its prompts were sized to (RULER-8K
#: and RULER-16K are two workloads, never one pool); rows without a length (external records) pool by
#: family alone
POOL_KEYS = ["task_family", "context_tokens"]


def family_label(family: str, context_tokens: float = np.nan) -> str:
    """The task label of a family's pooled rows: ``ruler/* @8192`` pools every RULER task of the
    selection sized to 8192 tokens, ``ruler/*`` those of rows that give no length."""
    return f"{family}/*" if np.isnan(context_tokens) else f"{family}/* @{int(context_tokens)}"


def levels(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The rows as each level of the matrix groups them: per task, then relabelled once per task family
    and context length of two or more tasks (``family``) and once over every task (``pooled``). Each
    relabels a copy, so callers pass only the columns they need (with ``POOL_KEYS``)."""
    out: list[tuple[str, pd.DataFrame]] = [("task", rows)]
    member = rows[rows["task_family"] != ""]
    pools = member.groupby(POOL_KEYS, sort=True, dropna=False)["task"].nunique()
    for (family, length), n_tasks in pools.items():
        if n_tasks < 2:
            continue
        same = rows["context_tokens"].isna() if np.isnan(length) else rows["context_tokens"] == length
        pool = rows[(rows["task_family"] == family) & same]
        out.append(("family", pool.assign(task=family_label(family, length))))
    if rows["task"].nunique() > 1:
        out.append(("pooled", rows.assign(task=POOLED)))
    return out


def matrix(rows: pd.DataFrame) -> pd.DataFrame:
    """Per task x reader x compressor x setting, plus FullCache rows and source-weighted pools: one per
    task family and context length of two or more tasks (``level`` family, between its tasks and the
    pooled rows) and one over every task (``level`` pooled). Each judge's accuracy over the answers it
    judged, and how many, stand next to the task's accuracy (``kvx.aggregate.paired.judges``)."""
    needed = [*CELL, "ratio", *POOL_KEYS, "status", "comp_score", "comp_correct", "transition"]
    # the pools relabel a copy of these only
    rows = rows[needed + ["unit", "full_score", "full_correct", *metric_columns(rows), *judge_columns(rows)]]
    parts = []
    for level, frame in levels(rows):
        parts += [
            _fullcache(frame, TASK_READER).assign(level=level),
            _cell_counts(frame, CELL).assign(level=level),
        ]
    out = pd.concat(parts, ignore_index=True)
    ratio = rows.drop_duplicates(["compressor", "setting"]).set_index(["compressor", "setting"])["ratio"]
    out["ratio"] = [ratio.get((c, s), np.nan) for c, s in zip(out["compressor"], out["setting"], strict=True)]
    columns = [
        "level",
        "task",
        "reader",
        "compressor",
        "setting",
        "ratio",
        "n_sources",
        "n_supported",
        "n_unsupported",
        "n_error",
        "quality",
        "accuracy",
        *(f"judge.{name}.{v}" for name in judge_names(rows) for v in ("accuracy", "n_judged")),
        "n_fc",
        "n_cc",
        "n_cw",
        "n_wc",
        "n_ww",
        "cw_rate",
    ]
    for name in metric_names(rows):  # each answer metric's mean and count (FullCache rows: the controls')
        columns += [f"m.{name}", f"m.{name}_n"]
    out = out.reindex(columns=columns)
    order = {"FullCache": 0}
    out["_full"] = out["compressor"].map(order).fillna(1)
    out["_level"] = out["level"].map({"task": 0, "family": 1, "pooled": 2})
    out = out.sort_values(["_level", "task", "reader", "_full", "compressor", "ratio"], kind="stable")
    return out.drop(columns=["_full", "_level"]).reset_index(drop=True)


def failure_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """F for every cell: supported, FullCache-correct, compressed-wrong (only from the full matrix)."""
    return rows[(rows["status"] == SUPPORTED) & (rows["transition"] == CW)]


def failures(rows: pd.DataFrame, metrics: list[Metric]) -> pd.DataFrame:
    """Diagnostic means over F ∩ A per cell, each with its valid count; empty intersection -> NaN."""
    cells = rows[rows["status"] == SUPPORTED][CELL].drop_duplicates()
    fails = failure_rows(rows)
    grouped = fails.groupby(CELL, sort=True)
    out = cells.merge(grouped.size().rename("n_failures").reset_index(), on=CELL, how="left")
    out["n_failures"] = out["n_failures"].fillna(0).astype(int)
    for m in metrics:
        stats = (
            grouped[m.name]
            .agg(["mean", "count"])
            .rename(columns={"mean": f"{m.name}_mean", "count": f"{m.name}_n"})
        )
        out = out.merge(stats.reset_index(), on=CELL, how="left")
        out[f"{m.name}_n"] = out[f"{m.name}_n"].fillna(0).astype(int)
    return out.sort_values(CELL).reset_index(drop=True)


def categories(rows: pd.DataFrame) -> pd.DataFrame:
    """Table 4: rows and shares of each category among a cell's C→W rows, and over all cells.

    Categories come from the records, or are derived from their diagnostic values (``n_derived``). A cell
    none of whose C→W rows has a diagnostic is one ``N/A`` row with no share: no category was measured,
    which is not 0% of each. Where only some rows lack diagnostics they are counted as not_categorized.
    """
    columns = [*CELL, "category", "rows", "share", "n_derived"]
    fails = failure_rows(rows)
    if fails.empty:
        return pd.DataFrame(columns=columns)
    parts = []
    for keys, group in [*fails.groupby(CELL, sort=True), (("all",) * 4, fails)]:
        known = group["category"].notna()
        if not known.any():
            part = pd.DataFrame({"category": [NO_DIAGNOSTICS], "rows": [len(group)], "share": [np.nan]})
            part["n_derived"] = 0
        else:
            names = list(CATEGORIES) + ([UNCATEGORIZED] if not known.all() else [])
            category = group["category"].fillna(UNCATEGORIZED)
            counts = category.value_counts().reindex(names, fill_value=0)
            derived = category[group["category_derived"].astype(bool)].value_counts()
            derived = derived.reindex(names, fill_value=0)
            part = pd.DataFrame(
                {
                    "category": names,
                    "rows": counts.to_numpy(),
                    "share": counts.to_numpy() / len(group),
                    "n_derived": derived.to_numpy(),
                }
            )
        for col, value in zip(CELL, keys, strict=True):
            part[col] = value
        parts.append(part)
    return pd.concat(parts, ignore_index=True)[columns]
