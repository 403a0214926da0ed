"""kvx's engine against kvpress's own way of running the same grid, on the same sources and model.

kvpress way: one pipeline call per (cell, source) plus one no-press baseline call per source.
kvx way: a fresh Engine (no stored controls) running every cell; one prefill per source.

Reports wall times and their ratio, the share of kvx's cell time spent outside model compute
(forward passes and press scoring), and whether every answer is identical.

    python benchmarks/bench_sweep.py --context 1024 4096 --sources 4
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from transformers import pipeline

from kvx.compressors.kvpress_adapter import KVPressCompressor
from kvx.core.records import as_dicts
from kvx.core.registry import registry
from kvx.modeling.reader import load_reader
from kvx.pipeline.cell import Cell
from kvx.pipeline.engine import Engine
from kvx.readers.embedded import SmolLM2
from kvx.tasks.ruler import NiahSingle

PRESSES = ("snapkv", "tova", "streaming_llm", "knorm")
RATIOS = (0.25, 0.5)


class ComputeClock:
    """Seconds spent in model forwards and in press compression (what is not overhead)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.seconds = 0.0
        self._t: list[float] = []
        for m in (model, model.model):
            m.register_forward_pre_hook(lambda *_: self._t.append(time.perf_counter()))
            m.register_forward_hook(lambda *_: self._stop())
        original = KVPressCompressor.compress_captured
        clock = self

        def timed(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                clock.seconds += time.perf_counter() - start

        KVPressCompressor.compress_captured = timed

    def _stop(self) -> None:
        start = self._t.pop()
        if not self._t:  # count nested forwards (model -> model.model) once
            self.seconds += time.perf_counter() - start


def run(context_tokens: int, n_sources: int, max_new_tokens: int) -> dict:
    reader = load_reader("smollm2", SmolLM2())
    task = NiahSingle()
    comps = {name: registry("compressor").get(name)() for name in PRESSES}
    cells = [
        Cell("ruler_niah_single", task, "smollm2", n, c, r, 0, n_sources, context_tokens, max_new_tokens)
        for n, c in comps.items()
        for r in RATIOS
    ]
    pipe = pipeline("kv-press-text-generation", model=reader.model, tokenizer=reader.tokenizer, device="cpu")
    with tempfile.TemporaryDirectory() as tmp:
        engine = Engine(Path(tmp), 8 * 2**30)
        sources = engine.sources(cells[0], reader)

        start = time.perf_counter()
        baseline = [
            pipe(
                s.context, question=s.question, answer_prefix=s.answer_prefix, max_new_tokens=max_new_tokens
            )["answer"]
            for s in sources
        ]
        kvpress_answers = {}
        for cell in cells:
            press = cell.compressor.build_press(cell.ratio)
            kvpress_answers[(cell.press_name, cell.ratio)] = [
                pipe(
                    s.context,
                    question=s.question,
                    answer_prefix=s.answer_prefix,
                    press=press,
                    max_new_tokens=max_new_tokens,
                )["answer"]
                for s in sources
            ]
        kvpress_s = time.perf_counter() - start

        clock = ComputeClock(reader.model)
        start = time.perf_counter()
        kvx_records = {
            (c.press_name, c.ratio): as_dicts(engine.run_cells([c], reader, progress=False)[0]) for c in cells
        }
        kvx_s = time.perf_counter() - start

    mismatches = 0
    for key, records in kvx_records.items():
        mismatches += sum(r["compressed"]["output"] != a for r, a in zip(records, kvpress_answers[key]))
        mismatches += sum(r["full"]["output"] != a for r, a in zip(records, baseline))
    return {
        "context_tokens": context_tokens,
        "prompt_tokens": kvx_records[(PRESSES[0], RATIOS[0])][0]["n_context_tokens"],
        "sources": n_sources,
        "cells": len(cells),
        "kvpress_s": round(kvpress_s, 1),
        "kvx_s": round(kvx_s, 1),
        "ratio_kvx_over_kvpress": round(kvx_s / kvpress_s, 3),
        "kvx_overhead_share": round(1 - clock.seconds / kvx_s, 3),
        "prefills_kvx": engine.prefills,
        "answer_mismatches": mismatches,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--context", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--sources", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    args = parser.parse_args()
    torch.manual_seed(0)
    for ctx in args.context:
        print(json.dumps(run(ctx, args.sources, args.max_new_tokens)), flush=True)


if __name__ == "__main__":
    main()
