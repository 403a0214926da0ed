"""The ragscale reader-upgrade audit at the paper's size: a synthetic score file of 20 readers in 10
families x 500 rows (binary em, graded f1), audited by ``python -m kvx.aggregate --scores`` as a whole
process with the paper's resampling, and each estimator of one metric timed on its own.

    python benchmarks/bench_rag_audit.py [--readers 20 --rows 500 --boot 5000 --splits 5000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd


def scores(readers: int, rows: int) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, list[str]]:
    rng = np.random.default_rng(0)
    skill = np.linspace(0.2, 0.85, readers)[:, None]
    raw = (rng.random((readers, rows)) < skill).astype(float)
    comp = (rng.random((readers, rows)) < 0.55 + 0.2 * skill).astype(float)
    families = [f"family{r // 2}" for r in range(readers)]
    frame = pd.DataFrame(
        {
            "row_id": np.tile([f"q{i}" for i in range(rows)], readers),
            "reader": np.repeat([f"reader{r:02d}" for r in range(readers)], rows),
            "family": np.repeat(families, rows),
            "compressor": "recomp",
            "raw_em": raw.ravel(),
            "comp_em": comp.ravel(),
            "raw_f1": (raw * 0.7 + rng.random(raw.shape) * 0.3).ravel(),
            "comp_f1": (comp * 0.7 + rng.random(raw.shape) * 0.3).ravel(),
        }
    )
    return frame, raw, comp, families


def estimators(raw: np.ndarray, comp: np.ndarray, families: list[str], boot: int, splits: int) -> None:
    from kvx.aggregate.ragscale.endpoints import endpoint_bootstrap, held_out_endpoints, swap_difference
    from kvx.aggregate.ragscale.gain_vs_raw import disjoint_rows, slope_and_headroom
    from kvx.aggregate.stats.eiv import eiv_bootstrap
    from kvx.aggregate.stats.upgrades import excess_flips

    timed = {
        "endpoint_bootstrap (Tables 2-3)": lambda: endpoint_bootstrap(raw, comp, families, boot, 1),
        "held_out_endpoints (Table 8)": lambda: held_out_endpoints(raw, comp, splits, 1),
        "slope_and_headroom: slope + headroom": lambda: slope_and_headroom(raw, comp, families, boot, 1),
        "disjoint_rows": lambda: disjoint_rows(raw, comp, splits, 1),
        "swap_difference (Table 15)": lambda: swap_difference(raw, comp, comp, families, boot, 1),
        "excess_flips": lambda: excess_flips(raw, comp, splits, 1),
        "excess_flips, McNemar filter": lambda: excess_flips(raw, comp, splits, 1, mcnemar_alpha=0.05),
        "eiv_bootstrap, families": lambda: eiv_bootstrap(raw, comp - raw, boot, 1, families=families),
    }
    for name, call in timed.items():
        started, cpu = time.perf_counter(), time.process_time()
        call()
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        print(f"  {name:34s} {wall:6.2f} s wall, {cpu:6.2f} s CPU")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readers", type=int, default=20)
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--boot", type=int, default=5000)
    parser.add_argument("--splits", type=int, default=5000)
    args = parser.parse_args()
    frame, raw, comp, families = scores(args.readers, args.rows)
    print(f"{args.readers} readers x {args.rows} rows, --boot {args.boot} --splits {args.splits}; em:")
    estimators(raw, comp, families, args.boot, args.splits)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scores.csv"
        frame.to_csv(path, index=False)
        command = [
            sys.executable,
            "-m",
            "kvx.aggregate",
            "--scores",
            str(path),
            "--out",
            str(Path(tmp) / "o"),
        ]
        command += [
            "--boot",
            str(args.boot),
            "--splits",
            str(args.splits),
            "--no-plots",
            "--no-log",
            "--quiet",
        ]
        started = time.perf_counter()
        before = os.times()
        done = subprocess.run(command, capture_output=True, text=True)
        after = os.times()
        cpu = after.children_user + after.children_system - before.children_user - before.children_system
        if done.returncode:
            sys.exit(f"kvx.aggregate failed ({done.returncode}):\n{done.stderr[-3000:]}")
        wall = time.perf_counter() - started
        print(f"python -m kvx.aggregate --scores, em and f1: {wall:.1f} s wall, {cpu:.1f} s CPU")


if __name__ == "__main__":
    main()
