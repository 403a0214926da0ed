"""``python -m kvx.aggregate``: tables, figures and a report from stored records, which it only reads.

``read/`` finds and validates records and flattens them into rows; the families (``paired/``,
``kvdiagnosis/``, ``tpbench/``, ``ragscale/``, ``kvexec/``) declare their tables in ``tables.py`` for the
catalogue (``catalogue.py``), over ``stats/``; ``run.py`` validates every batch and then builds the
catalogue's tables, each need once; ``publish/`` writes them, draws their figures and the report."""
