"""The TPBench grid on SGD with the embedded reader, run the way users run it: the CLI as a whole
process (two Hydra multiruns sharing one outputs folder), timed end to end.

    python benchmarks/bench_tpbench.py --path ../shared/data/sgd/test --sources 8 [--seeds 42 43 44]

Grid: P1/P2/P3 x seeds x 8 methods — six turn selectors at turn fraction 0.3 (press=none) and two
KV presses keeping 30% of the cache (ratio=0.7). The second multirun reuses the FullCache controls
the first one stored, so the controls are computed once per source. Reports wall time, records,
seconds per record, extrapolation to the paper's 200 sources per seed, and the prefill sharing
(controls computed vs reused).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

SELECTORS = ("recency", "earliest", "random", "uniform_stride", "mmr", "attention_proxy")
PRESSES = ("snapkv", "streaming_llm")


def run(args: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kvx", "-m", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"kvx failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", required=True, help="SGD test folder (official DSTC8 layout)")
    parser.add_argument("--sources", type=int, default=8, help="source questions drawn per seed")
    parser.add_argument("--seeds", nargs="+", type=int, default=[42, 43, 44])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/kvx-bench-tpbench"))
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    common = [
        "task=tpbench_p1,tpbench_p2,tpbench_p3",
        "task.corpus=sgd",
        f"task.path={Path(args.path).resolve()}",
        f"seed={','.join(map(str, args.seeds))}",
        f"n_sources={args.sources}",
        "diagnostics=[]",
        "progress=false",
    ]
    turn_args = [f"turn_selector={','.join(SELECTORS)}", "turn_fraction=0.3", "press=none"]
    selectors = run([*common, *turn_args], args.workdir)
    presses = run([*common, f"press={','.join(PRESSES)}", "ratio=0.7"], args.workdir)
    records = []
    for path in (args.workdir / "outputs" / "mlartifacts").rglob("records.jsonl"):
        records += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    controls = len(list((args.workdir / "outputs" / "controls").rglob("*.json")))
    total = selectors + presses
    per_seed_sources = len({(r["task"], r["seed"], r["source_id"]) for r in records}) / (3 * len(args.seeds))
    report = {
        "cells": (len(SELECTORS) + len(PRESSES)) * 3 * len(args.seeds),
        "records": len(records),
        "controls_stored": controls,
        "seconds_turn_selectors": round(selectors, 1),
        "seconds_kv_presses": round(presses, 1),
        "seconds_total": round(total, 1),
        "seconds_per_record": round(total / max(1, len(records)), 2),
        "sources_per_probe_and_seed": round(per_seed_sources, 1),
        "extrapolated_hours_at_200": round(total * 200 / max(1, args.sources) / 3600, 1),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
