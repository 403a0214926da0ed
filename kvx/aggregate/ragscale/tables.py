"""The reader-upgrade audit's tables (ragscale), declared for the catalogue (``kvx.aggregate.catalogue``).

Records and a scores file (``kvx.aggregate.scores``) give the same tables: the scores path supplies
its own ``audit_frame``, ``audit_run`` and ``slice_fields`` and the catalogue builds the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from kvx.aggregate.catalogue import Section, intermediate, table, tables
from kvx.aggregate.options import Options
from kvx.aggregate.ragscale.audit import AuditTables, audit, with_families
from kvx.aggregate.ragscale.controls import AuditControls
from kvx.aggregate.ragscale.draws import audit_draws as draws_of
from kvx.aggregate.ragscale.endpoint_scores import endpoint_scores
from kvx.aggregate.ragscale.outcomes import audit_changed as changed_of
from kvx.aggregate.ragscale.outcomes import audit_slices as slices_of
from kvx.aggregate.ragscale.outcomes import first_changed, with_outcomes
from kvx.aggregate.ragscale.predictive import predictive_audit
from kvx.aggregate.ragscale.settings import from_options
from kvx.aggregate.ragscale.shortlist import shortlist
from kvx.aggregate.ragscale.swap import swapped
from kvx.aggregate.read.problems import Problem

AUDIT = Section(
    "audit",
    "Reader-upgrade audit",
    80,
    "no reader-upgrade audit (needs two or more readers sharing a task, evidence condition and setting)",
)
NULLS = Section(
    "control_nulls",
    "Audit control: order-preserving nulls (ragscale Table 5)",
    81,
    "the audit did not run",
    True,
)
TRANSITIONS = Section(
    "control_transitions",
    "Audit control: transition homogeneity (ragscale A.6)",
    82,
    "the audit did not run",
    True,
)
RESOLUTION = Section(
    "control_resolution",
    "Audit control: resolution retention and cost (ragscale Table 6)",
    83,
    "the audit did not run",
    True,
)
SCREEN = Section(
    "control_screen",
    "Audit control: three-reader screen validation (ragscale Table 7)",
    84,
    "the audit did not run",
    True,
)
PREDICTIVE = Section(
    "control_predictive",
    "Audit control: spacing vs instability index, leave one cell out (after ragscale Table 18)",
    84.5,
    "the audit did not run",
    True,
)
DRAWS = Section(
    "repeated_draws",
    "Repeated artifact draws (ragscale Table 16, B.6)",
    85,
    "no repeated artifact draws",
    True,
)


@dataclass(frozen=True)
class AuditRun:
    """The audited panels and the control rows collected while auditing them."""

    audited: AuditTables
    controls: AuditControls


@intermediate
def audit_frame(rows: pd.DataFrame, options: Options, problems: list[Problem]) -> pd.DataFrame:
    """The rows the audit reads: the records' own, each ``--swap`` as one more evidence condition, under
    the user's reader families."""
    parts = [rows]
    for before, after in options.swaps:
        swap, found = swapped(rows, before, after)
        parts.append(swap)
        problems.extend(found)
    return with_families(pd.concat(parts, ignore_index=True), options.families)


@intermediate
def audit_run(audit_frame: pd.DataFrame, options: Options) -> AuditRun:
    controls = AuditControls.from_options(options)
    settings = from_options(options)
    audited = audit(
        audit_frame, options.pairs, options.n_splits, options.n_boot, options.seed, settings, controls.visit
    )
    return AuditRun(audited, controls)


@intermediate
def slice_fields(options: Options) -> list[str]:
    """The row hints the audit is sliced by (records: only those asked for)."""
    return options.slice_by or []


@tables(
    "audit_readers",
    "audit_pairs",
    "audit_panel",
    "audit_heldout",
    "audit_floor",
    "audit_swap_difference",
    section="audit",
)
def panel_tables(audit_run: AuditRun, options: Options, problems: list[Problem]) -> dict[str, pd.DataFrame]:
    """The audit's own tables, each compared upgrade labelled with ragscale's outcome."""
    found = audit_run.audited.tables()
    found["audit_pairs"] = with_outcomes(found["audit_pairs"], options.retention_alert)
    problems.extend(audit_run.audited.problems)
    return found


@table("audit_endpoints", "audit")
def audit_endpoints(audit_readers: pd.DataFrame, audit_pairs: pd.DataFrame) -> pd.DataFrame:
    """ragscale Figure 1's numbers: the endpoint readers' own scores and gains beside their upgrade."""
    return endpoint_scores(audit_readers, audit_pairs)


@table("audit_shortlist", "audit")
def audit_shortlist(audit_readers: pd.DataFrame) -> pd.DataFrame:
    """ragscale Figure 3 (right): the raw top three's winner under raw and compressed evidence."""
    return shortlist(audit_readers)


@table("audit_slices", "audit")
def audit_slices(
    audit_frame: pd.DataFrame,
    audit_pairs: pd.DataFrame,
    slice_fields: list[str],
    options: Options,
    problems: list[Problem],
) -> pd.DataFrame:
    slices, found = slices_of(audit_frame, audit_pairs, slice_fields, options.min_slice_rows, options.min_gap)
    problems.extend(found)
    return slices


@table("audit_changed", "audit", shown=first_changed)
def audit_changed(audit_frame: pd.DataFrame, audit_pairs: pd.DataFrame) -> pd.DataFrame:
    return changed_of(audit_frame, audit_pairs)


@intermediate
def control_tables(audit_run: AuditRun) -> dict[str, pd.DataFrame]:
    return audit_run.controls.tables()


@table("audit_nulls", "control_nulls")
def audit_nulls(control_tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    return control_tables["audit_nulls"]


@table("audit_transitions", "control_transitions")
def audit_transitions(control_tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    return control_tables["audit_transitions"]


@table("audit_resolution", "control_resolution")
def audit_resolution(control_tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    return control_tables["audit_resolution"]


@table("audit_screen", "control_screen")
def audit_screen(control_tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    return control_tables["audit_screen"]


@table("audit_draws", "repeated_draws")
def audit_draws(
    audit_frame: pd.DataFrame, audit_pairs: pd.DataFrame, audit_panel: pd.DataFrame
) -> pd.DataFrame | None:
    """Present only when some evidence condition was drawn more than once."""
    draws = draws_of(audit_frame, audit_pairs, audit_panel)
    return None if draws.empty else draws


@tables("audit_predictive", "audit_predictive_cells", section="control_predictive")
def predictive(audit_run: AuditRun, options: Options) -> dict[str, pd.DataFrame]:
    """kvx's check after ragscale B.7: does compressor-class dispersion predict excess flips?"""
    audited = audit_run.audited
    return predictive_audit(audited.readers, audited.panel, options.n_boot, options.seed)
