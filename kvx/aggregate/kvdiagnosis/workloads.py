"""KVDiagnosis's per-workload views: run accounting (Table 3), C→W rates by setting tier (Figure 4A,
Figure 10 left, Appendix D), failures by task and method (Figure 5, Figure 10 right), the diagnostic
corpus's coverage (Table 12), category shares per workload (Figure 7) and each cell's modal category
(Table 16).

A *workload* is the paper's unit (RULER-8K, RULER-16K, Qasper, HotpotQA): :func:`workload`. A *tier*
pools the settings the paper draws in one column: light = 75% retained (kvpress ratio 0.25) or 8-bit
QuantizedCache, intermediate = 50% or 4 bits, aggressive = 25% or 2 bits (Figure 4's caption, Table 12).
A setting outside the three tiers is listed with the reason and pooled into no tier. Every count is of
supported records; unsupported and errored records are counted beside them, never scored.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pandas as pd

from kvx.aggregate.paired.matrix import NO_DIAGNOSTICS, categories, family_label
from kvx.aggregate.read import text
from kvx.aggregate.read.rows import Metric
from kvx.compressors.hqq import RATIO_TO_BITS
from kvx.core.records import CW, ERROR, FULL_CORRECT, SUPPORTED, UNSUPPORTED
from kvx.diagnostics.categories import CATEGORIES

__all__ = [
    "TIERS",
    "accounting",
    "corpus",
    "modal_categories",
    "task_failures",
    "task_group",
    "tier_of",
    "tier_rank",
    "tiers",
    "with_workloads",
    "workload",
    "workload_categories",
]

TIERS = ("light", "intermediate", "aggressive")
#: kvpress compression ratio (the share removed) -> tier: the paper's 75/50/25% retained labels
RATIO_TIERS = {0.25: "light", 0.5: "intermediate", 0.75: "aggressive"}
#: QuantizedCache bit width -> tier: 8b/4b/2b (the release maps compression_ratio 0.25/0.5/0.75 to them,
#: as kvx's hqq does)
BITS_TIERS = {RATIO_TO_BITS[ratio]: tier for ratio, tier in RATIO_TIERS.items()}
QUANTIZED = "hqq"  # kvx's QuantizedCache: its setting is a bit width, not a share of positions
RULER = "ruler"  # the task family whose tasks pool by context length
TOTAL = "Total"
ALL = "all"
#: Table 16's means: (diagnostic, value) of the ECov, ΔNLL and GPR columns
MODAL_MEANS = (("coverage", "ecov"), ("likelihood", "delta_nll"), ("likelihood", "gpr"))
#: the diagnostic values the tables read: Table 12's ERR, ECov and EAR, and Table 16's means
READ_VALUES = {("coverage", "err"), ("attention", "ear"), *MODAL_MEANS}
#: the row columns the tables read (the rest of a row is left behind: a million rows are not copied whole)
COLUMNS = (
    "cell_id", "task", "task_family", "reader", "compressor", "setting", "ratio", "retained_share",
    "status", "transition", "unit", "category", "category_derived", "coverage_status",
)  # fmt: skip
MAPPED = ("measured", "projected")  # coverage states with numeric ERR/ECov (Section 4)
_VARIANT = re.compile(r"_\d+$")
_KEYS = ["workload", "reader"]
_CELL = [*_KEYS, "compressor", "setting"]

# ------------------------------------------------------------------------------------- labels


def tier_rank(tier: pd.Series) -> pd.Series:
    """Each tier's place for sorting, light first; a cell in no tier ("") last."""
    return tier.map({t: i for i, t in enumerate(TIERS)}).fillna(len(TIERS))


def _known(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value)) and value != ""


def workload(task: str, family: str, context_tokens: Any) -> str:
    """The paper's workload of a task. RULER's tasks at one context length are one workload
    (``ruler/* @8192`` is RULER-8K, the matrix's family pool); a RULER task without a recorded context
    length (the release imported as one task per dataset: ``ruler8k``) is its own; any other task pools
    with its family (the release imported per subtask: family ``ruler8k``), else stands alone."""
    if family == RULER:
        return family_label(RULER, float(context_tokens)) if _known(context_tokens) else task
    return family or task


def task_group(task: str) -> str:
    """A task with RULER's numbered variants pooled: ``ruler_niah_single_2`` -> ``ruler_niah_single``
    (the release's ``task_key`` groups niah_single_1..3 as ``ruler_single_niah``; Figure 5's rows).
    A label's bracketed suffix (fields that vary across the selection) is kept."""
    base, bracket, rest = task.partition("[")
    return _VARIANT.sub("", base) + bracket + rest


def method_of(compressor: str, press: str) -> str:
    """The compressor across its settings (Figures 5 and 10, Table 12's methods). QuantizedCache's bit
    width is its setting, so ``hqq[bits=4]`` is method ``hqq``; any other label is its own method."""
    if press != QUANTIZED:
        return compressor
    base, _, rest = compressor.partition("[")
    parts = [p for p in rest.removesuffix("]").split(", ") if p and not p.startswith("bits=")]
    return f"{base}[{', '.join(parts)}]" if parts else base


def tier_of(press: str, ratio: float, retained_share: float, bits: Any) -> tuple[str, str]:
    """(tier, "") of a setting, or ("", why it is in no tier). QuantizedCache (``hqq``) by its bit width:
    ``press.bits``, else bits/16 = its retained share, else kvx hqq's ratio mapping; every other
    compressor by its kvpress ratio."""
    if press == QUANTIZED:
        if not _known(bits) and _known(retained_share):
            bits = round(16 * float(retained_share), 6)
        if not _known(bits) and _known(ratio):
            bits = RATIO_TO_BITS.get(round(float(ratio), 6))
        if not _known(bits):
            return "", "QuantizedCache without a recorded bit width"
        bits = float(bits)
        tier = BITS_TIERS.get(int(bits)) if bits.is_integer() else None
        return (tier, "") if tier else ("", f"{bits:g} bits is not 8, 4 or 2")
    if not _known(ratio):
        return "", "no compression ratio (a token budget, or a compressor with no setting)"
    tier = RATIO_TIERS.get(round(float(ratio), 6))
    return (tier, "") if tier else ("", f"ratio {float(ratio):g} is not 0.25, 0.5 or 0.75")


def with_workloads(rows: pd.DataFrame, cells: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """The rows with ``workload``, ``task_group``, ``method``, ``tier`` and ``tier_excluded`` (the reason
    a cell is in no tier), each worked out once per cell from its identity fields."""
    first = rows.groupby("cell_id", sort=False).agg(
        task=("task", "first"),
        family=("task_family", "first"),
        compressor=("compressor", "first"),
        ratio=("ratio", "first"),
        share=("retained_share", "first"),  # first known: unsupported records carry none
    )
    info = {}
    for cid, r in first.iterrows():
        flat = cells.get(str(cid), {})
        press = str(flat.get("press") or str(r["compressor"]).partition("[")[0])
        tier, why = tier_of(press, r["ratio"], r["share"], flat.get("press.bits"))
        info[cid] = (
            workload(r["task"], r["family"], flat.get("context_tokens")),
            task_group(str(flat.get("task") or r["task"])),  # the task's name, not its label
            method_of(str(r["compressor"]), press),
            tier,
            why,
        )
    frame = pd.DataFrame.from_dict(
        info, orient="index", columns=["workload", "task_group", "method", "tier", "tier_excluded"]
    )
    ids = rows["cell_id"]
    return rows.assign(**{c: ids.map(frame[c]).to_numpy() for c in frame.columns})


# ------------------------------------------------------------------------------------- counts


def _ratio(num: pd.Series, den: pd.Series) -> pd.Series:
    return num / den.where(den > 0)


def _counts(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Records by status and supported FullCache-correct pairs (n_fc) and C→W rows (n_cw) per group."""
    sup = rows["status"] == SUPPORTED
    cw = sup & (rows["transition"] == CW)
    frame = pd.DataFrame(
        {
            **{k: rows[k] for k in keys},
            "n_records": 1,
            "n_unsupported": (rows["status"] == UNSUPPORTED).astype(int),
            "n_error": (rows["status"] == ERROR).astype(int),
            "n_supported": sup.astype(int),
            "n_fc": (sup & rows["transition"].isin(FULL_CORRECT)).astype(int),
            "n_cw": cw.astype(int),
        }
    )
    return frame.groupby(keys, sort=True).sum().reset_index()


def _failures(rows: pd.DataFrame) -> pd.DataFrame:
    """The C→W rows: supported, FullCache-correct, compressed-wrong."""
    return rows[(rows["status"] == SUPPORTED) & (rows["transition"] == CW)]


def accounting(rows: pd.DataFrame) -> pd.DataFrame:
    """Table 3 per workload and reader, then a ``Total`` row per reader: sources, records, N/A
    (unsupported), errors, runs (supported), FullCache-correct supported pairs (n_fc, "FC-elig."), C→W
    rows and the sources with at least one C→W row (n_affected_sources, "Unique")."""
    out = _counts(rows, _KEYS)
    rows = rows.assign(unit=text.exact(rows["unit"]))  # counted on exact codes: ids may hold a NUL
    out.insert(2, "n_sources", rows.groupby(_KEYS, sort=True)["unit"].nunique().to_numpy())
    unique = _failures(rows).groupby(_KEYS)["unit"].nunique().rename("n_affected_sources")
    out = out.merge(unique.reset_index(), on=_KEYS, how="left")
    out["n_affected_sources"] = out["n_affected_sources"].fillna(0).astype(int)
    out = out.rename(columns={"n_supported": "n_runs"})
    totals = out.drop(columns="workload").groupby("reader", sort=True).sum().reset_index()
    totals.insert(0, "workload", TOTAL)
    out = pd.concat([out, totals], ignore_index=True)
    columns = ["workload", "reader", "n_sources", "n_records", "n_unsupported", "n_error", "n_runs", "n_fc"]
    return out[[*columns, "n_cw", "n_affected_sources"]]


def tiers(rows: pd.DataFrame) -> pd.DataFrame:
    """Figure 4A's C→W rate per workload, reader and tier (``level`` workload: compressor ``all``), after
    the cells it pools (``level`` cell, with ``excluded`` saying why a cell is in no tier). The rate pools
    records, Σ C→W / Σ FullCache-correct supported pairs, as the paper pools across methods; an
    unsupported cell adds nothing to either."""
    keys = [*_CELL, "method", "tier", "tier_excluded"]
    cells = _counts(rows, keys).rename(columns={"tier_excluded": "excluded"})
    cells.insert(0, "level", "cell")
    cells["n_cells"] = 1
    pooled = (
        cells[cells["tier"] != ""]
        .groupby([*_KEYS, "tier"], sort=True)[
            ["n_records", "n_unsupported", "n_error", "n_supported", "n_fc", "n_cw", "n_cells"]
        ]
        .sum()
        .reset_index()
        .assign(level="workload", compressor=ALL, setting="", method=ALL, excluded="")
    )
    out = pd.concat([cells, pooled], ignore_index=True)
    out["cw_rate"] = _ratio(out["n_cw"], out["n_fc"])
    out["_tier"] = tier_rank(out["tier"])
    out["_level"] = (out["level"] == "workload").astype(int)
    out = out.sort_values(["_level", *_KEYS, "_tier", "compressor", "setting"], kind="stable")
    columns = ["level", *_CELL, "method", "tier", "n_cells", "n_records", "n_unsupported", "n_error"]
    return out[[*columns, "n_supported", "n_fc", "n_cw", "cw_rate", "excluded"]].reset_index(drop=True)


def task_failures(rows: pd.DataFrame) -> pd.DataFrame:
    """Figure 5's counts: C→W rows per workload, reader, task (numbered variants pooled: ``tasks`` lists
    them) and method (:func:`method_of`), over all its settings, next to the supported FullCache-correct
    pairs. Counts of composition, not difficulty: task groups hold different numbers of sources."""
    keys = [*_KEYS, "task_group", "method"]
    out = _counts(rows, keys).rename(columns={"task_group": "task"})
    members = rows.groupby([*_KEYS, "task_group"], sort=True)["task"].unique()
    out.insert(
        3,
        "tasks",
        [
            ", ".join(sorted(members[(w, r, t)]))
            for w, r, t in out[["workload", "reader", "task"]].itertuples(index=False)
        ],
    )
    return out[[*_KEYS, "task", "tasks", "method", "n_supported", "n_fc", "n_cw"]]


def _metric(metrics: list[Metric], diagnostic: str, value: str) -> Metric | None:
    return next((m for m in metrics if (m.diagnostic, m.value) == (diagnostic, value)), None)


def _ties(counts: pd.Series) -> str:
    """Every label with the highest count, joined by ' / ' in their order."""
    top = counts.max()
    return " / ".join(str(k) for k, v in counts.items() if v == top)


def _corpus_items(f: pd.DataFrame, methods: list[str], metrics: list[Metric]) -> list[tuple[str, str, int]]:
    """(item, group, rows) of one workload's C→W rows ``f``."""
    items = [("tier", tier, int((f["tier"] == tier).sum())) for tier in TIERS]
    if (f["tier"] == "").any():
        items.append(("tier", "excluded", int((f["tier"] == "").sum())))
    status = f["coverage_status"].dropna()
    items.append(("coverage_status", "recorded", len(status)))
    items += [("coverage_status", str(s), int(n)) for s, n in status.value_counts().sort_index().items()]
    err, ecov = _metric(metrics, "coverage", "err"), _metric(metrics, "coverage", "ecov")
    ear = _metric(metrics, "attention", "ear")
    numeric = 0
    if err is not None and ecov is not None:
        numeric = int((f["coverage_status"].isin(MAPPED) & f[err.name].notna() & f[ecov.name].notna()).sum())
    items.append(("numeric_err_ecov", "", numeric))
    items.append(("ear", "", 0 if ear is None else int(f[ear.name].notna().sum())))
    per = f["method"].value_counts().reindex(methods, fill_value=0)
    items.append(("most_frequent_method", _ties(per), int(per.max())))
    items.append(("least_frequent_method", _ties(-per), int(per.min())))
    return items


def corpus(rows: pd.DataFrame, metrics: list[Metric]) -> pd.DataFrame:
    """Table 12 per workload and reader, each item over the workload's C→W rows (n_cw): rows per tier
    (``excluded``: cells in no tier), rows with a recorded coverage state and per state, rows with numeric
    ERR and ECov (a measured or projected map), rows with a valid EAR, and the methods with the most and
    the fewest C→W rows (ties joined by ' / '; every method with supported records competes)."""
    columns = [*_KEYS, "item", "group", "rows", "n_cw", "share"]
    fails = _failures(rows)
    out = []
    for (name, reader), group in rows[rows["status"] == SUPPORTED].groupby(_KEYS, sort=True):
        f = fails[(fails["workload"] == name) & (fails["reader"] == reader)]
        methods = sorted(group["method"].unique())
        out += [(name, reader, *item, len(f)) for item in _corpus_items(f, methods, metrics)]
    frame = pd.DataFrame(out, columns=columns[:-1])
    frame["share"] = _ratio(frame["rows"].astype(float), frame["n_cw"].astype(float))
    return frame[columns]


def workload_categories(rows: pd.DataFrame) -> pd.DataFrame:
    """Figure 7: each Table 4 category's rows and share of a workload's C→W rows (every cell pooled;
    sources may recur), by the same rules as the ``categories`` table: a workload none of whose C→W rows
    has a diagnostic is one N/A row, rows without one beside diagnosed rows are not_categorized."""
    pooled = rows.assign(task=rows["workload"], compressor=ALL, setting=ALL)
    table = categories(pooled)
    table = table[~((table["task"] == ALL) & (table["reader"] == ALL))]  # its own pooled row: all workloads
    table = table.rename(columns={"task": "workload"})
    totals = _failures(pooled).groupby(_KEYS).size().rename("n_cw").reset_index()
    table = table.merge(totals, on=_KEYS, how="left")
    return table[[*_KEYS, "category", "rows", "n_cw", "share", "n_derived"]].reset_index(drop=True)


def modal_categories(rows: pd.DataFrame, metrics: list[Metric]) -> pd.DataFrame:
    """Table 16 per cell: the most frequent category among its C→W rows (ties joined by ' / ' in Table 4
    order; modal_share = its rows / n_cw), the coverage states of those rows, and the ECov, ΔNLL and GPR
    means over the rows where each is valid. ``reason`` says why a cell has no mode."""
    out = _counts(rows, [*_CELL, "tier"])
    fails = _failures(rows)
    grouped = dict(iter(fails.groupby(_CELL, sort=True)))
    means = [m for m in (_metric(metrics, d, v) for d, v in MODAL_MEANS) if m is not None]
    records = []
    for key in out[_CELL].itertuples(index=False):
        f = grouped.get(tuple(key), fails.iloc[:0])
        known = f["category"].dropna()
        counts = known.value_counts().reindex(list(CATEGORIES), fill_value=0)
        entry: dict[str, Any] = {
            "n_categorized": len(known),
            "modal_category": _ties(counts) if len(known) else NO_DIAGNOSTICS,
            "n_modal": int(counts.max()) if len(known) else np.nan,
            "coverage": " / ".join(sorted(f["coverage_status"].dropna().astype(str).unique())),
        }
        for m in means:
            values = f[m.name].dropna()
            entry[f"{m.name}_mean"] = values.mean() if len(values) else np.nan
            entry[f"{m.name}_n"] = len(values)
        records.append(entry)
    extra = pd.DataFrame(records, index=out.index)
    out = pd.concat([out, extra], axis=1)
    out["modal_share"] = _ratio(out["n_modal"], out["n_cw"].astype(float))
    out["reason"] = np.select(
        [
            (out["n_supported"] == 0) & (out["n_unsupported"] > 0),
            out["n_supported"] == 0,
            out["n_cw"] == 0,
            out["n_categorized"] == 0,
        ],
        ["unsupported", "no supported records", "no C→W rows", "no C→W row has a category"],
        "",
    )
    mean_columns = [c for m in means for c in (f"{m.name}_mean", f"{m.name}_n")]
    columns = [*_CELL, "tier", "n_supported", "n_unsupported", "n_cw", "n_categorized", "modal_category"]
    return out[[*columns, "n_modal", "modal_share", "coverage", *mean_columns, "reason"]]
