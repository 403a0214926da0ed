"""TPBench's tables, declared for the catalogue (``kvx.aggregate.catalogue``); none without TPBench
records."""

from __future__ import annotations

from typing import Any

import pandas as pd

from kvx.aggregate.catalogue import Section, intermediate, table, tables
from kvx.aggregate.options import Options
from kvx.aggregate.tpbench import paper_tables as paper
from kvx.aggregate.tpbench.budgets import tpbench_gap_tables
from kvx.aggregate.tpbench.probes import tpbench_rows, tpbench_tables

TPBENCH = Section("tpbench", "TPBench probes", 110, "no TPBench records in the selected runs", optional=True)


@intermediate
def tp(rows: pd.DataFrame, cells: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """The TPBench answers, labelled once for every table."""
    return tpbench_rows(rows, cells)


@tables(
    "tpbench_p1",
    "tpbench_p2",
    "tpbench_p3",
    "tpbench_rankings",
    "tpbench_spearman",
    "tpbench_rank_change",
    "tpbench_retention",
    "tpbench_deletion",
    section="tpbench",
)
def probes(tp: pd.DataFrame, options: Options) -> dict[str, pd.DataFrame]:
    return tpbench_tables(tp, options.n_boot, options.seed)


# The paper's tables, each only when its probe or method ran (Tables 7, 9, 10, 15, 23 and §6.3)


@table("tpbench_p1_seeds", "tpbench")
def tpbench_p1_seeds(tp: pd.DataFrame) -> pd.DataFrame | None:
    """Table 23."""
    return None if tp.empty else paper.p1_seeds(tp)


@table("tpbench_slot_types", "tpbench")
def tpbench_slot_types(tp: pd.DataFrame) -> pd.DataFrame | None:
    """Table 7."""
    return None if tp.empty else paper.slot_types(tp)


@table("tpbench_p3_alias_excluded", "tpbench")
def tpbench_p3_alias_excluded(tp: pd.DataFrame) -> pd.DataFrame | None:
    """Table 9."""
    return None if tp.empty else paper.alias_excluded(tp)


@table("tpbench_p3_parsed", "tpbench")
def tpbench_p3_parsed(tp: pd.DataFrame) -> pd.DataFrame | None:
    """Table 10's Seg.|parsed."""
    return None if tp.empty else paper.p3_parsed(tp)


@table("tpbench_evidence", "tpbench")
def tpbench_evidence(tp: pd.DataFrame) -> pd.DataFrame | None:
    """§6.3."""
    return None if tp.empty else paper.evidence(tp)


@table("tpbench_kv_vs_selectors", "tpbench")
def tpbench_kv_vs_selectors(tp: pd.DataFrame) -> pd.DataFrame | None:
    """Table 15."""
    return None if tp.empty else paper.kv_vs_selectors(tp)


@tables("tpbench_crossover", "tpbench_gap", "tpbench_tokens", section="tpbench")
def budgets(tp: pd.DataFrame, tpbench_p1: pd.DataFrame | None, tpbench_p2: pd.DataFrame | None) -> dict:
    """§6.1.2 crossover, Table 8 gaps, Appendix B token scaling."""
    found = {
        name: frame
        for name, frame in (("tpbench_p1", tpbench_p1), ("tpbench_p2", tpbench_p2))
        if frame is not None
    }
    return tpbench_gap_tables(tp, found)
