"""The bottom floor: shared types and plumbing every other floor may import (sources, settings,
records, cell identities, errors and value checks, the entry-point registry). Imports nothing of kvx
above it, and no heavy library at import time."""
