"""Aggregate at the size of real releases, timed the way users run it: ``python -m kvx.aggregate`` as a
fresh process (imports included), runs alternating between inputs, medians reported.

    python benchmarks/bench_aggregate.py release       # 62,400 records, every table and figure
    python benchmarks/bench_aggregate.py diagnostics   # 60,000 records with every diagnostic
    python benchmarks/bench_aggregate.py million       # 1,000,320 records, --no-plots, streamed
    [--repeat 3] [--workdir /tmp/kvx-bench-aggregate]

``release`` is KVDiagnosis's public release in shape: 4 tasks x 650 sources x 8 methods x 3 settings,
ThinK at 25% kept unsupported, 1% errored runs, no diagnostics; it is read from an MLflow store (logged
like a sweep) and from the same records as a ``.jsonl.gz`` directory, and both must give identical
tables. ``diagnostics`` adds every diagnostic and the intervention (the figure-heavy path: categories,
forest plot). ``million`` is 16 tasks x 2,605 sources x 24 cells as ``.jsonl.gz`` files. Peak memory is
the aggregate process's max RSS and, separately, its largest worker's.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from kvx.testing.synthetic import Grid, log_sweep, write_records

METHODS = ("streaming_llm", "snapkv", "tova", "keydiff", "think", "chunkkv", "adakv", "hqq")
RULER = ("niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe")
GRIDS = {
    "release": Grid(
        tasks=("ruler_niah_single", "ruler_vt", "qasper", "hotpotqa"),
        readers=("smollm2",),
        compressors=METHODS,
        ratios=(0.25, 0.5, 0.75),
        n_sources=650,
        diagnostics=False,
        intervention=False,
        unsupported=(("think", 0.75),),
        error_rate=0.01,
    ),
    "diagnostics": Grid(
        tasks=("ruler_niah_single", "ruler_niah_multikey", "ruler_vt", "hotpotqa"),
        readers=("smollm2",),
        compressors=("snapkv", "tova", "streaming_llm", "think", "hqq"),
        ratios=(0.1, 0.25, 0.5, 0.75, 0.9),
        n_sources=600,
    ),
    "million": Grid(
        tasks=tuple(f"ruler_{t}{s}" for t in RULER for s in ("", "_16k"))[:13]
        + ("qasper", "hotpotqa", "squad"),
        readers=("smollm2",),
        compressors=METHODS,
        ratios=(0.25, 0.5, 0.75),
        n_sources=2605,
        diagnostics=False,
        intervention=False,
        unsupported=(("think", 0.75),),
        error_rate=0.01,
    ),
}
CHILD = (
    "import resource, sys; from kvx.aggregate.__main__ import main; code = main(sys.argv[1:]); "
    "print('maxrss_kib', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
    "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)"
)


def timed(args: list[str]) -> tuple[float, float, float, str]:
    """Wall seconds of a fresh process, its peak RSS and its largest worker's (MiB), its summary line."""
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, "--quiet", "--no-log", *args], capture_output=True, text=True
    )
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(proc.stdout + proc.stderr)
    lines = proc.stdout.splitlines()
    _, own, worker = next(line for line in lines if line.startswith("maxrss_kib")).split()
    summary = next(line for line in lines if line.startswith("kvx.aggregate:"))
    return seconds, int(own) / 1024, int(worker) / 1024, summary


def generate(name: str, workdir: Path) -> dict[str, list[str]]:
    """The inputs of one benchmark: label -> the aggregate's input arguments."""
    grid = GRIDS[name]
    records = workdir / "records"
    started = time.perf_counter()
    n = write_records(records, grid)
    inputs = {"record directory (.jsonl.gz)": ["--records", str(records)]}
    if name != "million":
        from mlflow.tracking import MlflowClient

        uri = f"sqlite:///{workdir / 'mlflow.db'}"  # artifacts beside it, as python -m kvx keeps them
        MlflowClient(uri).create_experiment("kvx", artifact_location=(workdir / "mlruns").as_uri())
        log_sweep(uri, grid)
        inputs = {"MLflow store": ["--tracking-uri", uri], **inputs}
    print(f"generated {n:,} records ({', '.join(inputs)}): {time.perf_counter() - started:.0f} s")
    return inputs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("size", choices=sorted(GRIDS))
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--workdir", type=Path, default=Path("/tmp/kvx-bench-aggregate"))
    args = p.parse_args()
    workdir = args.workdir / args.size
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    inputs = generate(args.size, workdir)
    extra = ["--no-plots"] if args.size == "million" else []
    runs: dict[str, list[tuple[float, float, float, str]]] = {label: [] for label in inputs}
    for i in range(args.repeat):  # alternating inputs, so drift on a shared machine hits both alike
        for k, (label, given) in enumerate(inputs.items()):
            runs[label].append(timed([*given, "--out", str(workdir / f"out-{k}-{i}"), *extra]))
    for label, results in runs.items():
        walls = ", ".join(f"{r[0]:.1f}" for r in results)
        own, worker = max(r[1] for r in results), max(r[2] for r in results)
        median = statistics.median(r[0] for r in results)
        print(
            f"{label:30s} median {median:.1f} s wall ({walls}), peak RSS {own:.0f}, worker {worker:.0f} MiB"
        )
        print(f"{'':30s} {results[-1][3]}")
    if len(inputs) == 2:  # the store and its records as files must give the same numbers
        out_a, out_b = workdir / "out-0-0", workdir / "out-1-0"
        csvs = sorted(q.name for q in out_a.glob("*.csv") if q.name != "problems.csv")
        differ = [n for n in csvs if not filecmp.cmp(out_a / n, out_b / n, shallow=False)]
        print(
            f"tables identical: {not differ} ({len(csvs)} CSV files; differ: {', '.join(differ) or 'none'})"
        )


if __name__ == "__main__":
    main()
