"""The KVDiagnosis tables without a home elsewhere: paired cases (Figure 8 / Table 15), slot-ECov rank
correlation across readers (Figure 9B), the context-demand profile (Tables 13-14, Figure 12) and the
SnapKV/PyramidKV adapter audit (Table 5). Built when the records hold C->W rows with a diagnostic
category (a KVDiagnosis-style run or import) or release tables sit next to them."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from kvx.aggregate.kvdiagnosis.cases import cases
from kvx.aggregate.kvdiagnosis.demand import demand_tables
from kvx.aggregate.kvdiagnosis.pyramidkv import pyramidkv_pairs, release_audit
from kvx.aggregate.kvdiagnosis.slot_ecov import slot_ecov_cells, slot_ecov_rank
from kvx.aggregate.read.release_tables import ReleaseTables
from kvx.core.records import CW


def kvdiagnosis_release_tables(
    rows: pd.DataFrame, release: ReleaseTables, n_cases: int, chosen: Sequence[str] = ()
) -> dict[str, pd.DataFrame]:
    categorized = "category" in rows and bool(rows.loc[rows["transition"] == CW, "category"].notna().any())
    if not categorized and release.demand.empty and release.audit is None:
        return {}
    cells = slot_ecov_cells(rows)
    return {
        "kvd_cases": cases(rows, n_cases, chosen),
        **demand_tables(rows, release),
        "kvd_slot_ecov_cells": cells,
        "kvd_slot_ecov_rank": slot_ecov_rank(cells),
        "kvd_pyramidkv_pairs": pyramidkv_pairs(rows),
        "kvd_pyramidkv_release": release_audit(release.audit),
    }
