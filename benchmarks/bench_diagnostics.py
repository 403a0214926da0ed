"""Cost of the default diagnostics (coverage + likelihood + decoding) on the embedded reader.

Runs the same cells twice on one engine whose controls and captured prefills are already warm,
once without diagnostics and once with them, and reports the wall-time ratio per cell.

    python benchmarks/bench_diagnostics.py --sources 10 --context 1024
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from kvx.core.records import as_dicts
from kvx.core.registry import registry
from kvx.modeling.reader import load_reader
from kvx.pipeline.cell import Cell
from kvx.pipeline.engine import Engine
from kvx.readers.embedded import SmolLM2
from kvx.tasks.ruler import NiahSingle

CELLS = (
    ("snapkv", 0.5),
    ("tova", 0.5),
    ("streaming_llm", 0.5),
    ("think", 0.25),
    ("hqq", 0.5),
    ("chunkkv", 0.5),
)
DEFAULT = ("coverage", "likelihood", "decoding")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sources", type=int, default=10)
    parser.add_argument("--context", type=int, default=1024)
    args = parser.parse_args()
    reader = load_reader("smollm2", SmolLM2())
    diags = [(n, registry("diagnostic").get(n)()) for n in DEFAULT]
    with tempfile.TemporaryDirectory() as tmp:
        engine = Engine(Path(tmp), 8 * 2**30)
        totals = [0.0, 0.0]
        for name, ratio in CELLS:
            comp = registry("compressor").get(name)()
            base = Cell(
                "ruler_niah_single",
                NiahSingle(),
                "smollm2",
                name,
                comp,
                ratio,
                0,
                args.sources,
                args.context,
                24,
            )
            engine.run_cells([base], reader, progress=False)[0]  # controls and captures
            start = time.perf_counter()
            engine.run_cells([base], reader, progress=False)[0]
            plain = time.perf_counter() - start
            base.diagnostics = diags
            start = time.perf_counter()
            records = as_dicts(engine.run_cells([base], reader, progress=False)[0])
            with_diags = time.perf_counter() - start
            totals[0] += plain
            totals[1] += with_diags
            statuses = {
                n: sorted({r["diagnostics"][n]["status"] for r in records if "diagnostics" in r})
                for n in DEFAULT
            }
            print(
                json.dumps(
                    {
                        "cell": f"{name}@{ratio}",
                        "plain_s": round(plain, 2),
                        "diagnostics_s": round(with_diags, 2),
                        "ratio": round(with_diags / plain, 3),
                        "statuses": statuses,
                    }
                ),
                flush=True,
            )

        # the FullCache side of likelihood is computed once per source: the first cell pays it
        print(json.dumps({"sweep_ratio": round(totals[1] / totals[0], 3)}))


if __name__ == "__main__":
    main()
