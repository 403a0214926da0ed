"""Floor 1, the command line: the Hydra job (``app``), its sweep callback, the preflight that checks
a command line before anything runs, config registration and per-job grouping."""
