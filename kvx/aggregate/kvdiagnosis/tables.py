"""KVDiagnosis's tables, declared for the catalogue (``kvx.aggregate.catalogue``)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from kvx.aggregate.catalogue import Section, intermediate, table, tables
from kvx.aggregate.kvdiagnosis import workloads
from kvx.aggregate.kvdiagnosis.fidelity import delta_nll
from kvx.aggregate.kvdiagnosis.intervention import intervention as intervention_of
from kvx.aggregate.kvdiagnosis.intervention_cohort import intervention_cohort as cohort_of
from kvx.aggregate.kvdiagnosis.jaccard import workload_jaccard
from kvx.aggregate.kvdiagnosis.qa_pool import qa_tiers
from kvx.aggregate.kvdiagnosis.release import kvdiagnosis_release_tables
from kvx.aggregate.options import Options
from kvx.aggregate.read.release_tables import ReleaseTables, release_tables
from kvx.aggregate.read.rows import Metric
from kvx.aggregate.read.sources import Source

INTERVENTION = Section("intervention", "Intervention", 60, "no intervention records in the selected runs")
WORKLOADS = Section(
    "kvdiagnosis",
    "Workloads and setting tiers (KVDiagnosis)",
    100,
    "no compressed records in the selected runs",
    optional=True,
)
EXTRA = Section(
    "kvdiagnosis_extra",
    "KVDiagnosis: paired cases, context demand, cross-reader coverage, PyramidKV audit",
    130,
    "no C→W rows with a diagnostic category and no KVDiagnosis release tables",
    optional=True,
)


@table("intervention", "intervention")
def intervention(rows: pd.DataFrame, options: Options) -> pd.DataFrame:
    return intervention_of(rows, options.n_boot, options.seed)


@table("intervention_cohort", "intervention")
def intervention_cohort(rows: pd.DataFrame, options: Options) -> pd.DataFrame:
    return cohort_of(rows, options.n_boot, options.seed)


@intermediate
def workload_rows(
    rows: pd.DataFrame, cells: dict[str, dict[str, Any]], metrics: list[Metric]
) -> pd.DataFrame:
    """The compressed rows (FullCache is each row's partner, not a cell) labelled with their workload and
    setting tier, with the diagnostics the views read."""
    values = [m.name for m in metrics if (m.diagnostic, m.value) in workloads.READ_VALUES]
    return workloads.with_workloads(rows[[*workloads.COLUMNS, *values]], cells)


@table("kvd_accounting", "kvdiagnosis")
def kvd_accounting(workload_rows: pd.DataFrame) -> pd.DataFrame:
    """Table 3."""
    return workloads.accounting(workload_rows)


@table("kvd_tiers", "kvdiagnosis")
def kvd_tiers(workload_rows: pd.DataFrame) -> pd.DataFrame:
    """Figure 4A, Figure 10 (left), Appendix D."""
    return workloads.tiers(workload_rows)


@table("kvd_qa_tiers", "kvdiagnosis")
def kvd_qa_tiers(kvd_tiers: pd.DataFrame) -> pd.DataFrame | None:
    """Figure 9A: Qasper and HotpotQA pooled, ThinK left out."""
    return qa_tiers(kvd_tiers)


@table("kvd_jaccard", "kvdiagnosis")
def kvd_jaccard(workload_rows: pd.DataFrame) -> pd.DataFrame:
    """Figures 4B and 9C: failure-set Jaccard per workload and tier."""
    return workload_jaccard(workload_rows)


@table("kvd_delta_nll", "kvdiagnosis")
def kvd_delta_nll(
    workload_rows: pd.DataFrame, metrics: list[Metric], options: Options
) -> pd.DataFrame | None:
    """RQ4 (§5.5): failure-row ΔNLL per method, pooled over its settings."""
    return delta_nll(workload_rows, metrics, options.n_boot, options.seed)


@table("kvd_task_failures", "kvdiagnosis")
def kvd_task_failures(workload_rows: pd.DataFrame) -> pd.DataFrame:
    """Figure 5, Figure 10 (right)."""
    return workloads.task_failures(workload_rows)


@table("kvd_corpus", "kvdiagnosis")
def kvd_corpus(workload_rows: pd.DataFrame, metrics: list[Metric]) -> pd.DataFrame:
    """Table 12."""
    return workloads.corpus(workload_rows, metrics)


@table("kvd_workload_categories", "kvdiagnosis")
def kvd_workload_categories(workload_rows: pd.DataFrame) -> pd.DataFrame:
    """Figure 7."""
    return workloads.workload_categories(workload_rows)


@table("kvd_modal_categories", "kvdiagnosis")
def kvd_modal_categories(workload_rows: pd.DataFrame, metrics: list[Metric]) -> pd.DataFrame:
    """Table 16."""
    return workloads.modal_categories(workload_rows, metrics)


@intermediate
def release(source: Source) -> ReleaseTables:
    """The KVDiagnosis release tables next to imported records (what could not be read: a note)."""
    found = release_tables(source)
    source.notes.extend(found.notes)
    return found


@tables(
    "kvd_cases",
    "kvd_demand_tasks",
    "kvd_demand_settings",
    "kvd_demand_profile",
    "kvd_slot_ecov_cells",
    "kvd_slot_ecov_rank",
    "kvd_pyramidkv_pairs",
    "kvd_pyramidkv_release",
    section="kvdiagnosis_extra",
)
def release_views(rows: pd.DataFrame, release: ReleaseTables, options: Options) -> dict[str, pd.DataFrame]:
    """Figures 8, 9B, 12; Tables 5, 13-15."""
    return kvdiagnosis_release_tables(rows, release, options.cases, options.case_sources)
