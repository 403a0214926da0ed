"""kvx's Hydra plugins (search path, config source, sweeper)."""
