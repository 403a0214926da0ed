"""Analyses over the validated rows: the matrix and failure sets, matched comparisons, separation,
intervention and its cohort, contrast, the reader-upgrade audit and its statistics, the cost frontier, and the
TPBench tables."""
