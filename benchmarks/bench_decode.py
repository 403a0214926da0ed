"""Per-step decode cost: the FullCache control and four compressed caches of one source decoded one
after another (``greedy_decode``) against together in one batched forward per step
(``greedy_decode_batch``), on SmolLM2, alternating, with the answers compared token for token.

    python benchmarks/bench_decode.py --context 1024 4096 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from kvx.core.registry import registry
from kvx.modeling.generation import greedy_decode
from kvx.modeling.reader import load_reader
from kvx.pipeline.batched import DecodeJob, greedy_decode_batch
from kvx.pipeline.cell import Cell
from kvx.pipeline.compress import compress
from kvx.pipeline.encode import encode
from kvx.pipeline.engine import Engine
from kvx.readers.embedded import SmolLM2
from kvx.tasks.ruler import NiahSingle

CELLS = (("snapkv", 0.25), ("snapkv", 0.5), ("tova", 0.25), ("tova", 0.5))


@torch.inference_mode()
def run(context_tokens: int, repeats: int, max_new_tokens: int) -> dict:
    reader = load_reader("smollm2", SmolLM2())
    model = reader.model
    eos = model.generation_config.eos_token_id
    model.generation_config.eos_token_id = None  # every job decodes max_new_tokens steps
    engine = Engine(Path(tempfile.mkdtemp()), 2**32)
    comp = registry("compressor").get("snapkv")()
    first = Cell("ruler_niah_single", NiahSingle(), "smollm2", "snapkv", comp, 0.5, 0, 1, context_tokens, 32)
    source = engine.sources(first, reader)[0]
    prompt = encode(reader, source)
    capture = engine.caches.capture(reader, prompt.context_ids)
    runs = [
        compress(engine.caches, reader, registry("compressor").get(n)(), r, prompt, False)[1]
        for n, r in CELLS
    ]

    def jobs() -> list[DecodeJob]:
        full = DecodeJob(capture.full_cache(), prompt.question_ids, capture.n_tokens, max_new_tokens)
        return [full] + [DecodeJob(r.build(), r.feed, r.start, max_new_tokens) for r in runs]

    sequential, batched, mismatches = [], [], 0
    for _ in range(repeats):
        todo = jobs()
        start = time.perf_counter()
        alone = [
            greedy_decode(model, reader.tokenizer, j.cache, j.feed, j.start, max_new_tokens) for j in todo
        ]
        sequential.append(time.perf_counter() - start)
        todo = jobs()
        start = time.perf_counter()
        together = greedy_decode_batch(model, reader.tokenizer, todo)
        batched.append(time.perf_counter() - start)
        mismatches += sum(a.token_ids != b.token_ids for a, b in zip(alone, together))
    model.generation_config.eos_token_id = eos
    steps = max_new_tokens  # the question feed, then max_new_tokens - 1 one-token steps
    seq, bat = statistics.median(sequential), statistics.median(batched)
    return {
        "context_tokens": int(prompt.context_ids.shape[1]),
        "caches": 1 + len(runs),
        "steps": steps,
        "sequential_s": round(seq, 2),
        "batched_s": round(bat, 2),
        "sequential_ms_per_step": round(1000 * seq / steps, 1),
        "batched_ms_per_step": round(1000 * bat / steps, 1),
        "speedup": round(seq / bat, 2),
        "token_mismatches": mismatches,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--context", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args()
    for ctx in args.context:
        print(json.dumps(run(ctx, args.repeats, args.max_new_tokens)), flush=True)


if __name__ == "__main__":
    main()
