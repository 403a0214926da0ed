"""What the report says about the KVDiagnosis tables built by ``kvx.aggregate.kvdiagnosis.release``
(paired cases, demand profile, slot-ECov rank correlation, PyramidKV audit)."""

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
EXPLANATION = (
    "kvd_cases (Figure 8 / Table 15) = per task and diagnostic category, the --cases most extreme C→W "
    "rows on the category's signature (rule column; low/partial coverage: lowest ECov; low-EAR: lowest "
    "EAR; decoding/scoring: smallest |ΔNLL|; others: largest ΔNLL; rank 0: a --case source's C→W rows), "
    "FullCache output beside the "
    "compressed one, the references and the diagnostics; n_category_rows = the category's C→W rows. "
    "kvd_demand_tasks (Table 13) = the C→W rows that carry the KVDiagnosis release's context-demand labels, "
    "by RULER task group; kvd_demand_settings (Table 14; Figure 11 draws it per task, N/A cells gray) = "
    "every task, compressor and setting. Diagnostic "
    "means come from the records over each column's own valid rows (n_ columns); ERR/ECov are N/A for "
    "structural coverage (coverage column). evidence_presence is the mean label (0-3); "
    "distribution_demand and access_demand are the release's metric-derived scores, access only where a "
    "valid eager-attention trace exists. The release publishes the labels, not their lookup or thresholds: "
    "runs kvx made have none (N/A with the reason). kvd_demand_profile (Figure 12) = each label's and "
    "score's distribution. kvd_slot_ecov_cells / kvd_slot_ecov_rank (Figure 9B) = mean slot ECov of "
    "mapped (measured/projected) C→W rows per reader, compressor and setting, pooled over tasks, and the "
    "Spearman ρ between every two readers over their shared cells (N/A under two readers or three cells). "
    "kvd_pyramidkv_pairs (Table 5, from records) = SnapKV and PyramidKV answers on the same source: "
    "n_<field>_compared = pairs with both values, n_<field>_equal = identical; all outputs equal is the "
    "paper's sign of a "
    "PyramidKV that did not apply its layer budgets (kvx keeps no retained indices: ECov stands in). "
    "kvd_pyramidkv_release = the release's audit as published (representative pairs with index/output "
    "sha256 prefixes, then per-field equal pairs)."
)
