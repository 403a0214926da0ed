"""``python -m kvx.aggregate``: tables, figures and a report from stored records, which it only reads.

``read/`` finds and validates records and flattens them into rows, ``analyse/`` computes every table
(KVDiagnosis, ragscale, TPBench, kv-exec-bench summaries), ``publish/`` writes and logs them;
``run.py`` validates every batch and then runs every analysis."""
