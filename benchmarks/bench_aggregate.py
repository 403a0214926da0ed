"""Aggregate at the size of real releases, timed the way users run it: ``python -m kvx.aggregate`` as a
fresh process (imports included), runs alternating between inputs, medians reported.

    python benchmarks/bench_aggregate.py release       # 62,400 records, every table and figure
    python benchmarks/bench_aggregate.py diagnostics   # 60,000 records with every diagnostic
    python benchmarks/bench_aggregate.py million       # 1,000,320 records, --no-plots, streamed
    python benchmarks/bench_aggregate.py task-files    # the release's records in one file per task
    python benchmarks/bench_aggregate.py task-files --records DIR   # a record directory you have
    [--repeat 3] [--workdir /tmp/kvx-bench-aggregate] [--schema1]

``release`` is KVDiagnosis's public release in shape: 4 tasks x 650 sources x 8 methods x 3 settings,
ThinK at 25% kept unsupported, 1% errored runs, no diagnostics; it is read from an MLflow store (logged
like a sweep) and from the same records as a ``.jsonl.gz`` directory, and both must give identical
tables. ``diagnostics`` adds every diagnostic and the intervention (the figure-heavy path: categories,
forest plot). ``million`` is 16 tasks x 2,605 sources x 24 cells as ``.jsonl.gz`` files. Peak memory is
the aggregate process's max RSS and, separately, its largest worker's. ``--schema1`` also reads the study
as kvx 0.1 wrote it (schema 1, ``synthetic.as_schema1``), which the aggregate upgrades on read: its
tables must equal the schema-2 study's, except what schema 1 never recorded (costs, task families).
``task-files`` is the ``release`` study in the layout an importer writes (one ``.jsonl.gz`` of 15,600
records per task), read in parts (``kvx.aggregate.read.sources.PART_BYTES``) and each file as one batch;
``--records DIR`` times a directory you have instead (e.g. ``python -m kvx.importers kvdiagnosis``'s
output). Both readings must give identical tables.

Every run reads and draws afresh (``--no-cache``). ``--kept`` also times each input as a later aggregate
of the same files runs: with what a first, untimed aggregate kept in a cache folder under the workdir
(validated record files, drawn figures); its tables must be the fresh ones.
"""

from __future__ import annotations

import argparse
import filecmp
import gzip
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

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
    "import os, resource, sys; from kvx.aggregate.read import sources; "
    "sources.PART_BYTES = int(os.environ.get('BENCH_PART_BYTES', sources.PART_BYTES)); "
    "from kvx.aggregate.__main__ import main; code = main(sys.argv[1:]); "
    "print('maxrss_kib', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
    "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)"
)


#: what an input's label says about reading: each record file whole (one batch) instead of in parts
WHOLE = "(each file one batch)"
#: ... and about the cache: a later aggregate, loading what a first one kept
KEPT = "(kept)"


def timed(args: list[str], whole: bool = False, kept: Path | None = None) -> tuple[float, float, float, str]:
    """Wall seconds of a fresh process, its peak RSS and its largest worker's (MiB), its summary line.
    Read and drawn afresh, or with the cache folder ``kept``."""
    env = {**os.environ, "BENCH_PART_BYTES": str(1 << 62)} if whole else dict(os.environ)
    if kept is None:
        args = [*args, "--no-cache"]
    else:
        env["KVX_CACHE_DIR"] = str(kept)
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, "--quiet", "--no-log", *args], capture_output=True, text=True, env=env
    )
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(proc.stdout + proc.stderr)
    lines = proc.stdout.splitlines()
    _, own, worker = next(line for line in lines if line.startswith("maxrss_kib")).split()
    summary = next(line for line in lines if line.startswith("kvx.aggregate:"))
    return seconds, int(own) / 1024, int(worker) / 1024, summary


SCHEMA1 = "schema-1 records (.jsonl.gz)"
#: tables with what schema 1 never recorded: costs (unknown there, not zero), task families (pooled rows)
SCHEMA1_UNKNOWN = ("costs.csv", "frontier.csv", "matrix.csv")


def per_task(cells: Path, out: Path) -> None:
    """The per-cell record files joined into one ``<task>.jsonl.gz`` per task, as an importer writes."""
    out.mkdir(parents=True)
    by_task: dict[str, list[Path]] = {}
    for path in sorted(cells.glob("*.jsonl.gz")):
        if path.name.endswith(".controls.jsonl.gz"):
            shutil.copy(path, out / path.name)
        else:
            by_task.setdefault(path.name.split("__")[0], []).append(path)
    for task, paths in by_task.items():
        with gzip.open(out / f"{task}.jsonl.gz", "wb", compresslevel=1) as writer:
            for path in paths:
                with gzip.open(path, "rb") as fh:
                    shutil.copyfileobj(fh, writer)


def task_files(workdir: Path, records: Path | None) -> dict[str, list[str]]:
    """``task-files``: the given directory, or the release study in one file per task; each input twice."""
    if records is None:
        started = time.perf_counter()
        write_records(workdir / "cells", GRIDS["release"])
        per_task(workdir / "cells", workdir / "records")
        records = workdir / "records"
        print(f"generated the release study, one file per task: {time.perf_counter() - started:.0f} s")
    given = ["--records", str(records)]
    return {"record files read in parts": given, f"record files {WHOLE}": given}


def generate(name: str, workdir: Path, schema1: bool = False) -> dict[str, list[str]]:
    """The inputs of one benchmark: label -> the aggregate's input arguments."""
    grid = GRIDS[name]
    records = workdir / "records"
    started = time.perf_counter()
    n = write_records(records, grid)
    inputs = {"record directory (.jsonl.gz)": ["--records", str(records)]}
    if schema1:
        write_records(workdir / "records-schema1", grid, schema1=True)
        inputs[SCHEMA1] = ["--records", str(workdir / "records-schema1")]
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
    p.add_argument("size", choices=sorted([*GRIDS, "task-files"]))
    p.add_argument("--records", type=Path, help="task-files: time this record directory instead")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--workdir", type=Path, default=Path("/tmp/kvx-bench-aggregate"))
    p.add_argument("--schema1", action="store_true", help="also read the study as kvx 0.1 wrote it")
    p.add_argument("--kept", action="store_true", help="also time each input with a filled cache")
    args = p.parse_args()
    workdir = args.workdir / args.size
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    if args.size == "task-files":
        inputs = task_files(workdir, args.records)
    else:
        inputs = generate(args.size, workdir, args.schema1)
    extra = ["--no-plots"] if args.size == "million" else []
    caches: dict[str, Path] = {}
    if args.kept:
        for k, (label, given) in enumerate(list(inputs.items())):
            caches[f"{label} {KEPT}"] = workdir / f"cache-{k}"
            timed(
                [*given, "--out", str(workdir / f"fill-{k}"), *extra],
                WHOLE in label,
                caches[f"{label} {KEPT}"],
            )
            inputs[f"{label} {KEPT}"] = given
    runs: dict[str, list[tuple[float, float, float, str]]] = {label: [] for label in inputs}
    for i in range(args.repeat):  # alternating inputs, so drift on a shared machine hits both alike
        for k, (label, given) in enumerate(inputs.items()):
            out = str(workdir / f"out-{k}-{i}")
            runs[label].append(timed([*given, "--out", out, *extra], WHOLE in label, caches.get(label)))
    for label, results in runs.items():
        walls = ", ".join(f"{r[0]:.1f}" for r in results)
        own, worker = max(r[1] for r in results), max(r[2] for r in results)
        median = statistics.median(r[0] for r in results)
        print(
            f"{label:30s} median {median:.1f} s wall ({walls}), peak RSS {own:.0f}, worker {worker:.0f} MiB"
        )
        print(f"{'':30s} {results[-1][3]}")
    first = workdir / "out-0-0"  # every input must give the first one's numbers
    for k, label in enumerate(inputs):
        if k == 0:
            continue
        out = workdir / f"out-{k}-0"
        csvs = sorted(q.name for q in first.glob("*.csv") if q.name != "problems.csv")
        differ = [
            n for n in csvs if not (out / n).is_file() or not filecmp.cmp(first / n, out / n, shallow=False)
        ]
        if label == SCHEMA1:
            unknown = [n for n in differ if n in SCHEMA1_UNKNOWN]
            differ = [n for n in differ if n not in SCHEMA1_UNKNOWN]
            print(
                f"{label}: matrix identical without the schema-2 task-family rows: {_same_matrix(first, out)}"
            )
            print(f"{'':30s} differ as expected (unknown in schema 1): {', '.join(unknown) or 'none'}")
        print(
            f"tables identical: {not differ} ({len(csvs)} CSV files; differ: {', '.join(differ) or 'none'})"
        )


def _same_matrix(schema2: Path, schema1: Path) -> bool:
    """Schema 1 records have no task family, so the matrix has no family rows; every other row is equal."""
    a, b = pd.read_csv(schema2 / "matrix.csv"), pd.read_csv(schema1 / "matrix.csv")
    a = a[a["level"] != "family"].reset_index(drop=True)
    return a.equals(b)


if __name__ == "__main__":
    main()
