"""Aggregate a KVDiagnosis-sized release: 60,000 records over 100 cell runs, from MLflow and from files.

    python benchmarks/bench_aggregate.py [--sources 600] [--workdir /tmp/kvx-bench-aggregate]

Generates schema-valid synthetic records (kvx.aggregate.synthetic, with every diagnostic and the
intervention), logs them as one sweep into a fresh sqlite MLflow store and exports them as a
record directory, then times ``python -m kvx.aggregate`` on each in a fresh process and reports
wall time and peak memory (max RSS) and whether the two give identical tables.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import subprocess
import sys
import time
from pathlib import Path

from kvx.aggregate.synthetic import Grid, log_sweep

GRID = dict(
    tasks=("ruler_niah_single", "ruler_niah_multikey", "ruler_vt", "hotpotqa"),
    readers=("smollm2",),
    compressors=("snapkv", "tova", "streaming_llm", "think", "hqq"),
    ratios=(0.1, 0.25, 0.5, 0.75, 0.9),
)


CHILD = (
    "import resource, sys; from kvx.aggregate.__main__ import main; code = main(sys.argv[1:]); "
    "print('maxrss_kib', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss); sys.exit(code)"
)


def timed(args: list[str]) -> tuple[float, float, str]:
    """Wall seconds (fresh process, imports included), its peak RSS in MiB, and its summary line."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, "--quiet", *args], capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(proc.stdout + proc.stderr)
    lines = proc.stdout.splitlines()
    peak = int(next(line for line in lines if line.startswith("maxrss_kib")).split()[1]) / 1024
    return seconds, peak, next(line for line in lines if line.startswith("kvx.aggregate:"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sources", type=int, default=600)
    p.add_argument("--workdir", type=Path, default=Path("/tmp/kvx-bench-aggregate"))
    args = p.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    uri = f"sqlite:///{args.workdir / 'mlflow.db'}"
    grid = Grid(**GRID, n_sources=args.sources)
    started = time.perf_counter()
    log_sweep(uri, grid)
    runs = len(grid.tasks) * len(grid.readers) * len(grid.compressors) * len(grid.ratios)
    seconds = time.perf_counter() - started
    print(f"generated {runs * args.sources} records in {runs} cell runs: {seconds:.1f} s")
    records = args.workdir / "records"
    out_a, out_b = args.workdir / "from-mlflow", args.workdir / "from-files"
    wall_a, rss_a, line_a = timed(["--tracking-uri", uri, "--out", str(out_a), "--no-log"])
    export = ["--export-records", str(records), "--out", str(args.workdir / "export")]
    timed(["--tracking-uri", uri, "--no-log", *export])
    wall_b, rss_b, line_b = timed(["--records", str(records), "--out", str(out_b), "--no-log"])
    size = sum(f.stat().st_size for f in records.rglob("*.jsonl")) / 2**20
    print(f"record files: {size:.0f} MiB")
    print(f"MLflow store:            {wall_a:.1f} s wall, peak RSS {rss_a:.0f} MiB | {line_a}")
    print(f"record directory:        {wall_b:.1f} s wall, peak RSS {rss_b:.0f} MiB | {line_b}")
    csvs = sorted(p.name for p in out_a.glob("*.csv"))
    differ = [name for name in csvs if not filecmp.cmp(out_a / name, out_b / name, shallow=False)]
    print(f"tables identical: {not differ} ({len(csvs)} CSV files; differ: {', '.join(differ) or 'none'})")


if __name__ == "__main__":
    main()
