"""ragscale's reader-upgrade audit: does a reader comparison survive compressed evidence? The panel's
estimators, its controls (A.6-A.7), outcome labels and release gate, slices, draws and swaps."""
