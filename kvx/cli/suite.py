"""Suite presets: ``+experiment=kvdiagnosis/main`` runs its parts' sweeps one after another.

A study whose workloads need different split fields (RULER at 8K and at 16K, natural-context QA
that has no context length) is not one Hydra grid: crossed, it would run the QA tasks once per
context length as two cells. A suite names one preset per workload; every part is checked before
the first one runs, then each runs as its own ``python -m kvx`` process, exactly the command a user
could type for that part, into the same store.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

from kvx.cli.preflight import prepare


def check(parts: Sequence[tuple[str, list[str]]], config_dir: str) -> None:
    """Run every part's preflight (names, values, every job of its sweep) before anything runs."""
    for _, argv in parts:
        prepare(argv, config_dir)


def run(parts: Sequence[tuple[str, list[str]]]) -> int:
    """Each part in its own process, in order; the first that fails stops the suite (its exit code)."""
    for i, (name, argv) in enumerate(parts, 1):
        print(f"kvx: suite part {i}/{len(parts)}: +experiment={name}", file=sys.stderr, flush=True)
        code = subprocess.call([sys.executable, "-m", "kvx", *argv])
        if code != 0:
            print(
                f"kvx: suite part {name} failed (exit {code}); parts after it did not run. Rerun the same "
                "command to resume: finished cells are reused",
                file=sys.stderr,
            )
            return code
    return 0
