"""The tables every aggregate shows, declared for the catalogue (``kvx.aggregate.catalogue``)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from kvx.aggregate.catalogue import Section, intermediate, table
from kvx.aggregate.options import Options
from kvx.aggregate.paired.costs import costs as cell_costs_of
from kvx.aggregate.paired.costs import frontier as frontier_of
from kvx.aggregate.paired.judges import agreement, judge_names
from kvx.aggregate.paired.matched import matched as matched_of
from kvx.aggregate.paired.matrix import categories as categories_of
from kvx.aggregate.paired.matrix import failures as failures_of
from kvx.aggregate.paired.matrix import matrix as matrix_of
from kvx.aggregate.paired.separation import separation as separation_of
from kvx.aggregate.read.cells import with_varying
from kvx.aggregate.read.rows import Metric
from kvx.aggregate.read.validation import Validated

MATRIX = Section("matrix", "Matrix", 10, "no matrix cells in the selected runs")
COSTS = Section("costs", "Costs & accuracy–cost frontier", 20, "no matrix cells in the selected runs")
FAILURES = Section("failures", "Failure sets & categories", 30, "no C→W failure rows in the selected runs")
MATCHED = Section(
    "matched",
    "Matched comparisons (Jaccard)",
    40,
    "no matched comparisons (needs two compressors with failures at the same task, reader and setting)",
)
SEPARATION = Section(
    "separation",
    "Separation",
    50,
    "no separation estimates (needs C→W and C→C rows with valid diagnostics in the same strata)",
)
PROVENANCE = Section(
    "unknown_fields", "External records: unknown fields", 90, "every record is kvx's own", optional=True
)
JUDGES = Section("judges", "Judges", 120, "no judged answers in the selected runs", optional=True)


@table("matched", "matched", early=True)
def matched(rows: pd.DataFrame, metrics: list[Metric]) -> pd.DataFrame:
    return matched_of(rows, metrics)


@intermediate
def by_cell(rows: pd.DataFrame) -> pd.DataFrame:
    """The matrix rows before the identity fields that vary between cells are added."""
    return matrix_of(rows)


@table("matrix", "matrix")
def matrix(
    by_cell: pd.DataFrame, rows: pd.DataFrame, cells: dict[str, dict[str, Any]], varying: list[str]
) -> pd.DataFrame:
    return with_varying(by_cell, rows, cells, varying)


@intermediate
def cell_costs(rows: pd.DataFrame, by_cell: pd.DataFrame) -> pd.DataFrame:
    return cell_costs_of(rows, by_cell)


@table("costs", "costs")
def costs(
    cell_costs: pd.DataFrame, rows: pd.DataFrame, cells: dict[str, dict[str, Any]], varying: list[str]
) -> pd.DataFrame:
    return with_varying(cell_costs, rows, cells, varying)


@table("frontier", "costs")
def frontier(cell_costs: pd.DataFrame) -> pd.DataFrame:
    return frontier_of(cell_costs)


@table("failures", "failures")
def failures(rows: pd.DataFrame, metrics: list[Metric]) -> pd.DataFrame:
    return failures_of(rows, metrics)


@table("categories", "failures")
def categories(rows: pd.DataFrame) -> pd.DataFrame:
    return categories_of(rows)


@table("separation", "separation", background=True)  # its bootstraps take seconds: another CPU's
def separation(rows: pd.DataFrame, metrics: list[Metric], options: Options) -> pd.DataFrame:
    return separation_of(rows, metrics, options.n_boot, options.seed)


@table("judge_agreement", "judges")
def judge_agreement(rows: pd.DataFrame) -> pd.DataFrame | None:
    """Each judge against the task's scorer: confusion table and Cohen's kappa (when a judge ran)."""
    return agreement(rows) if judge_names(rows) else None


@table("provenance", "unknown_fields", on_empty=True)
def provenance(validated: Validated) -> pd.DataFrame | None:
    return validated.provenance() if validated.unknown else None
