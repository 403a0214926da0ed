"""kvx's CLI against kvpress's per-cell grid, each as one whole process, on the same JSONL sources.

Sources: RULER niah_single prompts (seed 0) sized for SmolLM2 and written once per context length to
a JSONL file (id, context, question, answers). Both sides read that file; kvx's ``jsonl`` task has no
answer prefix, so neither side uses RULER's.

kvx way: one ``python -m kvx -m task=jsonl ... press=<presses> ratio=<ratios>`` process (embedded
SmolLM2, context-only compression, no diagnostics, no tracing) with a fresh ``outputs_dir`` per run,
so no stored control or finished cell is reused.
kvpress way: one process (this file with ``--kvpress-worker``) loading the same weights through
kvx's reader and running kvpress's ``kv-press-text-generation`` pipeline: one no-press call per
source, then one call per (press, ratio, source) with kvx's own press objects.

Runs alternate kvx / kvpress (the order swaps each round), each timed with ``/usr/bin/time``; run it
on an otherwise idle machine (the 1-minute load average at the start is reported).
Prints one JSON line per context length: median wall seconds and peak RSS of each side, their
ratios, and how many answers differ (kvx's ``full.output`` against kvpress's no-press answer,
``compressed.output`` against the cell's answer, read from ``records.jsonl`` under
``<outputs_dir>/mlartifacts``).

Defaults reproduce issue 14: 1k tokens with 10 sources, presses snapkv,tova x ratios 0.25,0.5;
4k tokens with 4 sources and the same grid (kvpress then makes 20 pipeline calls, ~277 s in the
issue's measurement). ``--presses snapkv --ratios 0.5`` is one cell: kvx then saves one prefill of
two per source and batches two caches, so no ratio below ~0.5 is possible.
``--sources/--presses/--ratios`` override both context lengths.

    python benchmarks/bench_cli.py                      # both lengths, 3 runs each (~45 min on CPU)
    python benchmarks/bench_cli.py --context 1024 --sources 2 --runs 1 --presses snapkv --ratios 0.5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: context tokens -> (sources, presses, ratios) of the issue's measurement
DEFAULTS: dict[int, tuple[int, list[str], list[float]]] = {
    1024: (10, ["snapkv", "tova"], [0.25, 0.5]),
    4096: (4, ["snapkv", "tova"], [0.25, 0.5]),
}


def kvpress_worker(rows_path: str, out_path: str, presses: list[str], ratios: list[float], new: int) -> None:
    """kvpress's way: a baseline call per source and a pipeline call per (press, ratio, source)."""
    import kvpress  # noqa: F401 - registers the kv-press-text-generation pipeline
    from transformers import pipeline

    from kvx.core.registry import registry
    from kvx.modeling.reader import load_reader
    from kvx.readers.embedded import SmolLM2

    reader = load_reader("smollm2", SmolLM2())
    pipe = pipeline("kv-press-text-generation", model=reader.model, tokenizer=reader.tokenizer, device="cpu")
    rows = [json.loads(line) for line in Path(rows_path).read_text().splitlines() if line.strip()]

    def answer(row: dict[str, Any], press: Any = None) -> str:
        return pipe(row["context"], question=row["question"], press=press, max_new_tokens=new)["answer"]

    answers: dict[str, Any] = {"full": {row["id"]: answer(row) for row in rows}}
    for name in presses:
        compressor = registry("compressor").get(name)()
        for ratio in ratios:
            press = compressor.build_press(ratio)
            answers[f"{name}|{ratio}"] = {row["id"]: answer(row, press) for row in rows}
    Path(out_path).write_text(json.dumps(answers))


def write_rows(path: Path, context_tokens: int, n_sources: int) -> int:
    """RULER niah_single sources as JSONL rows; returns the longest prompt in SmolLM2 tokens."""
    from transformers import AutoTokenizer

    from kvx.modeling.weights import converted_folder
    from kvx.tasks.ruler import NiahSingle

    tok = AutoTokenizer.from_pretrained(str(converted_folder()))
    count = lambda text: len(tok.encode(text, add_special_tokens=False))  # noqa: E731
    sources = NiahSingle().sources(n_sources, 0, context_tokens, count)
    with path.open("w") as handle:
        for s in sources:
            row = {"id": s.id, "context": s.context, "question": s.question, "answers": s.answers}
            handle.write(json.dumps(row) + "\n")
    return max(s.metadata["prompt_tokens"] for s in sources)


def timed(cmd: list[str], env: dict[str, str], tmp: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one whole process; exits with its stderr if it fails."""
    stats = tmp / "time.txt"
    done = subprocess.run(
        ["/usr/bin/time", "-o", str(stats), "-f", "%e %M", *cmd],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-4000:]}")
    wall, peak_kib = stats.read_text().split()[-2:]
    return float(wall), float(peak_kib) / 1024


def compare(outputs_dir: Path, kvpress: dict[str, dict[str, str]]) -> tuple[int, list[dict]]:
    """Answers compared and the differing ones: each kvx record's ``full.output`` against kvpress's
    no-press answer and its ``compressed.output`` against the cell's; a kvpress answer with no kvx
    record counts as differing."""
    n, diffs, seen = 0, [], set()
    for path in sorted(outputs_dir.glob("mlartifacts/**/records.jsonl")):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            cell, source = f"{r['compressor']}|{r['setting'].get('value')}", r["source_id"]
            seen.add((cell, source))
            for side, key in (("full", "full"), ("compressed", cell)):
                n += 1
                ours, theirs = (r.get(side) or {}).get("output"), kvpress.get(key, {}).get(source)
                if ours != theirs:
                    diffs.append({"cell": key, "source": source, "kvx": ours, "kvpress": theirs})
    missing = [(c, s) for c in kvpress if c != "full" for s in kvpress[c] if (c, s) not in seen]
    diffs += [{"cell": c, "source": s, "kvx": None, "kvpress": kvpress[c][s]} for c, s in missing]
    return n + len(missing), diffs


def bench(context_tokens: int, n_sources: int, presses: list[str], ratios: list[float], args: Any) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    with tempfile.TemporaryDirectory(prefix="bench_cli_") as name:
        tmp = Path(name)
        rows = tmp / f"niah_{context_tokens}.jsonl"
        prompt_tokens = write_rows(rows, context_tokens, n_sources)
        times: dict[str, list[tuple[float, float]]] = {"kvx": [], "kvpress": []}
        load = round(os.getloadavg()[0], 2)  # other work on the machine skews both sides' times
        n_answers, diffs = 0, []
        for run in range(args.runs):
            out_dir, answers_path = tmp / f"kvx_{run}", tmp / f"kvpress_{run}.json"
            options = (
                f"task=jsonl task.id_field=id reader=smollm2 press={','.join(presses)}"
                f" ratio={','.join(map(str, ratios))} n_sources={n_sources} context_tokens={context_tokens}"
                f" max_new_tokens={args.max_new_tokens} diagnostics=[] progress=false tracing.sample=0"
                " query_aware=false"
            )
            worker = ["--presses", *presses, "--ratios", *map(str, ratios)]
            commands = {
                "kvx": [
                    sys.executable,
                    "-m",
                    "kvx",
                    "-m",
                    *options.split(),
                    f"task.path={rows}",
                    f"outputs_dir={out_dir}",
                ],
                "kvpress": [
                    sys.executable,
                    __file__,
                    "--kvpress-worker",
                    str(rows),
                    str(answers_path),
                    *worker,
                    "--max-new-tokens",
                    str(args.max_new_tokens),
                ],
            }
            for side in ("kvx", "kvpress") if run % 2 == 0 else ("kvpress", "kvx"):
                times[side].append(timed(commands[side], env, tmp))
            n, d = compare(out_dir, json.loads(answers_path.read_text()))
            n_answers, diffs = n_answers + n, diffs + d

    summary: dict[str, dict[str, Any]] = {}
    for name, runs in times.items():
        for index, (unit, digits) in enumerate((("s", 1), ("peak_mib", 0))):
            values = [run[index] for run in runs]
            summary[f"{name}_{unit}"] = {
                "median": round(statistics.median(values), digits),
                "runs": [round(v, digits) for v in values],
            }
    return {
        "context_tokens": context_tokens,
        "prompt_tokens_max": prompt_tokens,
        "sources": n_sources,
        "presses": presses,
        "ratios": ratios,
        "runs": args.runs,
        "load_avg_1m_at_start": load,
        **summary,
        "wall_ratio_kvx_over_kvpress": round(summary["kvx_s"]["median"] / summary["kvpress_s"]["median"], 3),
        "peak_ratio_kvx_over_kvpress": round(
            summary["kvx_peak_mib"]["median"] / summary["kvpress_peak_mib"]["median"], 3
        ),
        "n_answers": n_answers,
        "answer_mismatches": len(diffs),
        "first_mismatches": diffs[:3],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--context", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--sources", type=int, help="default: 10 at 1k, 4 at 4k")
    parser.add_argument("--presses", nargs="+", help="default: snapkv tova")
    parser.add_argument("--ratios", type=float, nargs="+", help="default: 0.25 0.5")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--kvpress-worker", nargs=2, metavar=("ROWS", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.kvpress_worker:
        kvpress_worker(*args.kvpress_worker, args.presses, args.ratios, args.max_new_tokens)
        return
    for ctx in args.context:
        sources, presses, ratios = DEFAULTS.get(ctx, DEFAULTS[1024])
        row = bench(ctx, args.sources or sources, args.presses or presses, args.ratios or ratios, args)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
