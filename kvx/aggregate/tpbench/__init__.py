"""TPBench's tables from records: the per-probe accuracies, rankings, retention and deletions, the
paper's own tables, and the budget views (crossover, gaps, token scaling)."""
