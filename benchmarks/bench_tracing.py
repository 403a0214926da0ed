"""What MLflow Tracing costs a cell: the same cells run with tracing off, at the default sample and
with every source traced, alternating, on the embedded SmolLM2 (the controls are computed once first,
so every timed pass does the same work: prefill-reusing compression, decode, evaluate).

    python benchmarks/bench_tracing.py --sources 10 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

from kvx.core.registry import registry
from kvx.modeling.reader import load_reader
from kvx.pipeline.cell import Cell
from kvx.pipeline.engine import Engine
from kvx.readers.embedded import SmolLM2
from kvx.stores import tracing
from kvx.tasks.ruler import NiahSingle


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sources", type=int, default=10)
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--samples", type=float, nargs="+", default=[0.0, 0.05, 1.0])
    args = p.parse_args()
    reader = load_reader("smollm2", SmolLM2())
    press = registry("compressor").get("snapkv")()
    with tempfile.TemporaryDirectory() as tmp:
        client = MlflowClient(tracking_uri=f"sqlite:///{tmp}/mlflow.db")
        exp = client.create_experiment("bench")
        tracing.configure(f"sqlite:///{tmp}/mlflow.db", exp)
        run_id = client.create_run(exp).info.run_id
        engine = Engine(Path(tmp), 8 * 2**30)
        cell = Cell(
            "ruler_niah_single",
            NiahSingle(),
            "smollm2",
            "snapkv",
            press,
            0.5,
            0,
            args.sources,
            args.context,
            24,
        )
        engine.run_cells([cell], reader, progress=False)[
            0
        ]  # controls and captures: every timed pass reuses them
        times: dict[float, list[float]] = {s: [] for s in args.samples}
        traced: dict[float, int] = {}
        for _ in range(args.repeats):
            for sample in args.samples:
                tracer = tracing.Tracer(sample, run_id)
                start = time.perf_counter()
                engine.run_cells([cell], reader, progress=False, tracers=[tracer])[0]
                tracer.flush()
                times[sample].append(time.perf_counter() - start)
                traced[sample] = tracer.traced
    off = statistics.median(times[0.0])
    out = {
        str(s): {
            "median_s": round(statistics.median(t), 3),
            "traced_sources": traced[s],
            "overhead_vs_off": round(statistics.median(t) / off - 1, 4),
        }
        for s, t in times.items()
    }
    # a small sample traces few sources, so its measured overhead is mostly noise: project it from
    # the cost of one trace (every source traced) against the time of one untraced source
    full = max(times, key=lambda s: traced[s])
    per_trace = (statistics.median(times[full]) - off) / max(traced[full], 1)
    per_source = off / args.sources
    projected = {str(s): round(s * per_trace / per_source, 4) for s in args.samples}
    summary = {"per_trace_s": round(per_trace, 4), "per_source_s": round(per_source, 4)}
    summary["projected_overhead"] = projected
    report = {"sources": args.sources, "context": args.context, "by_sample": out, **summary}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
