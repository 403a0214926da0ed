"""Aggregation statistics over stored records (ragscale and KVDiagnosis summaries)."""
