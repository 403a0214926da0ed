"""KVDiagnosis's views: per-workload tables and tiers, paired cases, context demand, the slot-ECov rank
across readers, the PyramidKV adapter audit and the evidence intervention (§5.3)."""
