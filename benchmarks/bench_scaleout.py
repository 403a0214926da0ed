"""Scale-out, measured the way users run it (whole ``python -m kvx`` processes).

``concurrency``: N sweeps started at once against one store (the embedded sqlite file, or a tracking
server on a private PostgreSQL cluster started here), half of them wanting the same cells; reports
failures, lost and duplicated records and the wall time.

``grouping``: the same grid through the joblib launcher as one-cell jobs and as grouped jobs
(``per_job``), alternating, fresh outputs each time; reports medians and the speed-up.

    python benchmarks/bench_scaleout.py concurrency --workers 8 --store sqlite
    python benchmarks/bench_scaleout.py concurrency --workers 16 --store server
    python benchmarks/bench_scaleout.py grouping --reader smollm2 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvx.stores import postgres
from kvx.stores.health import wait_healthy

LEASE = ["lease.heartbeat_s=2", "lease.stale_s=60", "lease.settle_s=0.3", "lease.poll_s=0.5"]
QUIET = ["progress=false", "diagnostics=[]"]


def env(uri: str | None = None) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"} | {
        "TOKENIZERS_PARALLELISM": "false"
    }
    return out | ({"MLFLOW_TRACKING_URI": uri} if uri else {})


def count(uri: str) -> dict[str, int]:
    """Finished cell runs, distinct cells, records and distinct (cell, source) pairs in the store."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("kvx").experiment_id
    runs = client.search_runs([exp], "tags.`kvx.role` = 'cell'", max_results=1000)
    records, pairs = 0, set()
    with tempfile.TemporaryDirectory() as tmp:
        for run in runs:
            path = client.download_artifacts(run.info.run_id, "records.jsonl", tmp)
            for line in Path(path).read_text().splitlines():
                records += 1
                pairs.add((run.data.tags["kvx.cell_id"], json.loads(line)["source_id"]))
    return {
        "cell_runs": len(runs),
        "unfinished": sum(r.info.status != "FINISHED" for r in runs),
        "cells": len({r.data.tags["kvx.cell_id"] for r in runs}),
        "records": records,
        "distinct_records": len(pairs),
    }


def concurrency(args: argparse.Namespace) -> dict:
    root = Path(tempfile.mkdtemp(prefix="kvx-bench-"))
    root.chmod(0o755)
    server = None
    uri = f"sqlite:///{root / 'outputs' / 'mlflow.db'}"
    try:
        if args.store == "server":
            port = postgres.free_port()
            server = subprocess.Popen(
                [sys.executable, "-m", "kvx.server", "--postgres", str(root / "pg"), "--port", str(port)],
                cwd=root,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            uri = f"http://127.0.0.1:{port}"
            wait_healthy(f"{uri}/health", server)
        ratios = [f"{0.1 * (i + 1):.1f}" for i in range(max(1, args.workers // 2))]
        grid = [(p, r) for r in ratios for p in ("snapkv",)]
        jobs = (grid * 2)[: args.workers]
        start = time.perf_counter()
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "kvx", "-m", f"reader={args.reader}", f"press={p}", f"ratio={r}"]
                + [f"n_sources={args.sources}", f"context_tokens={args.context}", "max_new_tokens=4"]
                + QUIET
                + LEASE,
                cwd=root,
                env=env(uri if server else None),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for p, r in jobs
        ]
        errors = [p.communicate()[1] for p in procs]
        wall = time.perf_counter() - start
        failed = [e[-500:] for p, e in zip(procs, errors) if p.returncode != 0 or "Traceback" in e]
        counts = count(uri)
        expected = len(set(jobs)) * args.sources
        return {
            "store": args.store,
            "workers": args.workers,
            "distinct_cells": len(set(jobs)),
            "wall_s": round(wall, 1),
            "failures": len(failed),
            "lost_records": expected - counts["distinct_records"],
            "duplicated_records": counts["records"] - counts["distinct_records"],
            **counts,
            "first_failure": failed[0] if failed else None,
        }
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def grouping(args: argparse.Namespace) -> dict:
    grid = ["task=ruler_niah_single,ruler_vt", "press=snapkv,tova", "ratio=0.25,0.5"]
    common = [f"reader={args.reader}", f"n_sources={args.sources}", f"context_tokens={args.context}"]
    common += ["max_new_tokens=8", "hydra/launcher=kvx_joblib", *QUIET]
    ways = {"one_cell_jobs": [], "grouped_jobs": ["per_job=[press,ratio]"]}
    times: dict[str, list[float]] = {k: [] for k in ways}
    for _ in range(args.repeats):
        for name, extra in ways.items():
            with tempfile.TemporaryDirectory() as tmp:
                start = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-m", "kvx", "-m", *grid, *common, *extra],
                    cwd=tmp,
                    env=env(),
                    capture_output=True,
                    text=True,
                )
                times[name].append(time.perf_counter() - start)
                if done.returncode != 0:
                    raise SystemExit(done.stderr[-3000:])
    medians = {k: round(statistics.median(v), 1) for k, v in times.items()}
    return {
        "grid": "2 tasks x 2 presses x 2 ratios = 8 cells; joblib n_jobs=2",
        "reader": args.reader,
        "sources": args.sources,
        "context_tokens": args.context,
        "runs_s": {k: [round(t, 1) for t in v] for k, v in times.items()},
        "median_s": medians,
        "speedup_grouped": round(medians["one_cell_jobs"] / medians["grouped_jobs"], 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    c = sub.add_parser("concurrency")
    c.add_argument("--workers", type=int, default=8)
    c.add_argument("--store", choices=["sqlite", "server"], default="sqlite")
    c.add_argument("--reader", default="tiny")
    c.add_argument("--sources", type=int, default=2)
    c.add_argument("--context", type=int, default=300)
    g = sub.add_parser("grouping")
    g.add_argument("--reader", default="smollm2")
    g.add_argument("--sources", type=int, default=3)
    g.add_argument("--context", type=int, default=512)
    g.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    print(json.dumps(concurrency(args) if args.what == "concurrency" else grouping(args), indent=1))


if __name__ == "__main__":
    main()
