"""The aggregate's statistics: estimators and tests, and the seeded resampling streams."""
