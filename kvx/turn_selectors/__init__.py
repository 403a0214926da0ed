"""Turn selectors: which dialogue turns a context keeps (TPBench)."""
