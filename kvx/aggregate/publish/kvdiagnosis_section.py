"""The report's section for the KVDiagnosis tables built by ``kvx.aggregate.kvdiagnosis.release``
(paired cases, demand profile, slot-ECov rank correlation, PyramidKV audit): its tables and figures;
its explanation is ``kvx/aggregate/prose/kvdiagnosis_extra.md``."""

from __future__ import annotations

TABLES = (
    "kvd_cases",
    "kvd_demand_tasks",
    "kvd_demand_settings",
    "kvd_demand_profile",
    "kvd_slot_ecov_cells",
    "kvd_slot_ecov_rank",
    "kvd_pyramidkv_pairs",
    "kvd_pyramidkv_release",
)

FIGURES = ("kvd_demand_profile", "kvd_slot_ecov", "kvd_settings_profile")
