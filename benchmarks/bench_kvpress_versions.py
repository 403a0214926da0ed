"""KVDiagnosis's presses under two kvpress versions (the paper's 0.5.3, kvx's 0.5.5): the same prompts
on the same model, the positions each press keeps per layer and KV head, and the greedy answers.

It imports torch, transformers and kvpress only (not kvx), so it runs in a second environment that has
another kvpress. Each run writes one JSON; ``compare`` diffs two of them::

    python benchmarks/bench_kvpress_versions.py run --model DIR --out /tmp/kvpress-0.5.5.json
    OTHER/.venv/bin/python benchmarks/bench_kvpress_versions.py run --model DIR --out /tmp/kvpress-0.5.3.json
    python benchmarks/bench_kvpress_versions.py compare /tmp/kvpress-0.5.3.json /tmp/kvpress-0.5.5.json

``DIR`` is any causal LM folder with its tokenizer; docs/compressors.md uses kvx's embedded SmolLM2
(``kvx.modeling.weights.converted_folder()``). The presses are built as the KVDiagnosis release's
``src/kvcachebench/presses.py`` builds them (Table 7): StreamingLLM (n_sink 4), SnapKV (window 64,
kernel 5), TOVA, KeyDiff, AdaKV over SnapKV (64, 5; alpha_safeguard 0.2), ThinK (key channel ratio
2·ratio, window 32; ratio 0.75 is out of its reach), ChunkKV over Knorm (kvpress's chunk_length 20) and
transformers' HQQ QuantizedCache (8/4/2 bits at ratio 0.25/0.5/0.75, group 64, residual 128). Each
prompt is compressed whole in one prefill and decoded greedily with the press still applied, as the
release's ``generate_text`` does.

Kept positions are read off the cache, not the press: a press copies the rows it keeps, so each row of
the compressed cache is matched to the one full-prefill key it equals. AdaKV keeps every row and masks
per head (``module.masked_key_indices``); ThinK keeps every row and zeroes key channels (its record is
the zeroed channels per head); a quantized cache keeps every position (answers only).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import random
import sys
from collections.abc import Iterator
from contextlib import nullcontext
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

PRESSES = ("StreamingLLM", "SnapKV", "TOVA", "KeyDiff", "AdaKV", "ThinK", "ChunkKV_Knorm", "QuantizedCache")
RATIOS = (0.25, 0.5, 0.75)
HQQ_BITS = {0.25: 8, 0.5: 4, 0.75: 2}  # the release's quantized_cache_nbits (hqq backend)
#: prompt lengths in tokens, multiples of ChunkKV's 20 so no layer keeps a partial last chunk (uneven
#: layers break transformers' one attention mask); 200 keeps fewer tokens at 0.75 (50) than SnapKV's
#: window (64), where the two versions' padding of the window's scores differs
LENGTHS = (200, 320, 480)

COLORS = ("red", "blue", "green", "amber", "violet", "grey", "white", "black", "golden", "silver")
ANIMALS = ("fox", "owl", "otter", "heron", "lynx", "badger", "crane", "moth", "seal", "wren")
FILLER = (
    "The archive was reorganised last spring and most boxes were relabelled.",
    "Visitors are asked to sign the register before entering the reading room.",
    "The heating in the east wing is switched off during the summer months.",
    "A new catalogue of maps was added to the collection in March.",
    "Volunteers sort the incoming letters every Tuesday morning.",
    "The building closes early on public holidays.",
)


def make_press(name: str, ratio: float) -> tuple[Any, str]:
    """The release's press for ``name`` at ``ratio`` (None with a reason where it cannot run)."""
    import kvpress

    if name == "StreamingLLM":
        return kvpress.StreamingLLMPress(compression_ratio=ratio, n_sink=4), ""
    if name == "SnapKV":
        return kvpress.SnapKVPress(compression_ratio=ratio, window_size=64, kernel_size=5), ""
    if name == "TOVA":
        return kvpress.TOVAPress(compression_ratio=ratio), ""
    if name == "KeyDiff":
        return kvpress.KeyDiffPress(compression_ratio=ratio), ""
    if name == "AdaKV":
        base = kvpress.SnapKVPress(compression_ratio=ratio, window_size=64, kernel_size=5)
        return kvpress.AdaKVPress(press=base, alpha_safeguard=0.2), ""
    if name == "ThinK":
        if ratio > 0.5:
            return None, f"ThinK prunes key channels only: ratio {ratio} needs {2 * ratio} of them"
        return kvpress.ThinKPress(key_channel_compression_ratio=2 * ratio, window_size=32), ""
    if name == "ChunkKV_Knorm":
        return kvpress.ChunkKVPress(press=kvpress.KnormPress(compression_ratio=ratio)), ""
    raise ValueError(name)


def prompts(tokenizer: Any) -> Iterator[tuple[str, list[int], str]]:
    """(id, token ids, expected answer): a passcode to find among facts and filler, cut to length."""
    for length in LENGTHS:
        rng = random.Random(length)
        pairs = [(c, a) for c in COLORS for a in ANIMALS]
        rng.shuffle(pairs)
        codes = {p: str(rng.randint(1000, 9999)) for p in pairs}
        target = pairs[0]
        lines = []
        for i, pair in enumerate(pairs[1:60]):
            if i == 4:
                lines.append(f"The passcode of the {target[0]} {target[1]} is {codes[target]}.")
            lines.append(f"The passcode of the {pair[0]} {pair[1]} is {codes[pair]}.")
            lines.append(FILLER[rng.randrange(len(FILLER))])
        question = (
            f"\nQuestion: What is the passcode of the {target[0]} {target[1]}?\nAnswer: The passcode is"
        )
        context = tokenizer("Read the notes, then answer.\n" + " ".join(lines)).input_ids
        tail = tokenizer(question, add_special_tokens=False).input_ids
        if len(context) + len(tail) < length:
            raise ValueError(f"the notes are shorter than {length} tokens")
        yield f"len{length}", context[: length - len(tail)] + tail, codes[target]


def kept_positions(full_keys: list[Any], keys: list[Any], masked: list[Any]) -> tuple[list[list[str]], int]:
    """Per layer and KV head the kept positions as a hex bitmask over the prompt, and how many cache
    rows matched no full-prefill key or more than one (0 when every row is a copied key)."""
    out, unmatched = [], 0
    for full, kept, mask_idx in zip(full_keys, keys, masked, strict=True):
        heads = []
        for h in range(full.shape[1]):
            eq = (kept[0, h][:, None, :] == full[0, h][None, :, :]).all(-1)  # cache row x position
            unmatched += int((eq.sum(-1) != 1).sum())
            mask = eq.any(0)
            if mask_idx is not None:  # AdaKV: every row stays; its (batch, head, position) triples drop out
                _, head_idx, seq_idx = mask_idx
                mask[seq_idx[head_idx == h]] = False
            heads.append(bitmask(mask))
        out.append(heads)
    return out, unmatched


def zeroed_channels(keys: list[Any]) -> list[list[str]]:
    """ThinK: per layer and KV head the key channels it zeroed, as a hex bitmask over head_dim."""
    return [[bitmask((k[0, h] == 0).all(0)) for h in range(k.shape[1])] for k in keys]


def bitmask(mask: Any) -> str:
    bits = mask.tolist()
    return f"{len(bits)}:{sum(1 << i for i, b in enumerate(bits) if b):x}"


def members(mask: str) -> set[int]:
    n, value = mask.split(":")
    bits = int(value, 16)
    return {i for i in range(int(n)) if bits >> i & 1}


def prefill_and_decode(
    model: Any, ids: Any, cache: Any, press: Any, n_new: int, eos: set[int]
) -> tuple[list[Any] | None, list[Any], list[int]]:
    """Prefill ``ids`` under ``press`` (None: none) and decode greedily with it still applied, as the
    release's ``generate_text`` does; positions continue the prompt's whatever the cache kept. Returns
    the keys per layer as the prefill left them (None for a quantized cache), AdaKV's masked indices
    per layer and the answer's token ids."""
    import torch

    n = ids.shape[1]
    answer: list[int] = []
    with torch.no_grad(), press(model) if press is not None else nullcontext():
        out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        keys = None if type(cache).__name__ == "QuantizedCache" else [x.keys.clone() for x in cache.layers]
        masked = [getattr(layer.self_attn, "masked_key_indices", None) for layer in model.model.layers]
        for step in range(n_new):
            token = int(out.logits[0, -1].argmax())
            answer.append(token)
            if token in eos or step == n_new - 1:
                break
            position = torch.tensor([[n + step]])
            out = model(input_ids=torch.tensor([[token]]), past_key_values=cache, position_ids=position)
    for layer in model.model.layers:  # AdaKV's masks must not reach the next prefill
        layer.self_attn.masked_key_indices = None
    return keys, masked, answer


def run(args: argparse.Namespace) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache, QuantizedCache
    from transformers.utils import logging

    torch.set_num_threads(args.threads)
    logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    result: dict[str, Any] = {
        "versions": {d: pkg_version(d) for d in ("kvpress", "torch", "transformers", "hqq")},
        "python": platform.python_version(),
        "model": str(args.model),
        "max_new_tokens": args.max_new_tokens,
        "prompts": {},
        "runs": [],
    }
    chosen = list(prompts(tokenizer))[: args.prompts]
    for pid, ids, expected in chosen:
        digest = hashlib.sha256(json.dumps(ids).encode()).hexdigest()
        result["prompts"][pid] = {"n_tokens": len(ids), "sha256": digest, "expected": expected}

    def record(entry: dict[str, Any], answer: list[int], **extra: Any) -> None:
        text = tokenizer.decode(answer, skip_special_tokens=True)
        result["runs"].append({**entry, "answer_ids": answer, "answer": text, **extra})
        print(f"{entry['dtype']} {entry['prompt']} {entry['press']}@{entry['ratio']}: {text!r}", flush=True)

    for dtype in args.dtypes:
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, dtype)).eval()
        for pid, ids_list, _ in chosen:
            ids = torch.tensor([ids_list])
            full_keys, _, answer = prefill_and_decode(
                model, ids, DynamicCache(), None, args.max_new_tokens, eos
            )
            record({"dtype": dtype, "prompt": pid, "press": "FullCache", "ratio": 0.0}, answer)
            for name in args.presses:
                for ratio in args.ratios:
                    entry = {"dtype": dtype, "prompt": pid, "press": name, "ratio": ratio}
                    if name == "QuantizedCache":
                        cache = QuantizedCache(
                            backend="hqq",
                            config=model.config,
                            nbits=HQQ_BITS[ratio],
                            q_group_size=64,
                            residual_length=128,
                        )
                        _, _, answer = prefill_and_decode(model, ids, cache, None, args.max_new_tokens, eos)
                        record(entry, answer, kept="structural", nbits=HQQ_BITS[ratio])
                        continue
                    press, reason = make_press(name, ratio)
                    if press is None:
                        result["runs"].append({**entry, "unsupported": reason})
                        continue
                    keys, masked, answer = prefill_and_decode(
                        model, ids, DynamicCache(), press, args.max_new_tokens, eos
                    )
                    if name == "ThinK":  # every row stays; the record is the zeroed key channels
                        record(entry, answer, zeroed_channels=zeroed_channels(keys))
                    else:
                        kept, unmatched = kept_positions(full_keys, keys, masked)
                        record(entry, answer, kept=kept, unmatched_rows=unmatched)
    Path(args.out).write_text(json.dumps(result))
    print(f"wrote {args.out} (kvpress {result['versions']['kvpress']}, {len(result['runs'])} runs)")


def pkg_version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def compare(args: argparse.Namespace) -> None:
    """Per press, ratio and dtype: prompts whose kept positions (ThinK: zeroed channels) and answers
    are the same under both runs, with the heads and positions that differ."""
    a, b = (json.loads(p.read_text()) for p in (args.a, args.b))
    va, vb = a["versions"]["kvpress"], b["versions"]["kvpress"]
    others = {d: (a["versions"][d], b["versions"][d]) for d in a["versions"] if d != "kvpress"}
    print(
        f"kvpress {va} vs {vb}; "
        + ", ".join(f"{d} {x}" + ("" if x == y else f" vs {y}") for d, (x, y) in others.items())
    )
    if a["prompts"] != b["prompts"]:
        print("the runs' prompts differ (token ids' sha256): nothing to compare")
        raise SystemExit(1)
    runs_b = {key(r): r for r in b["runs"]}
    rows: dict[tuple[str, str, float], dict[str, Any]] = {}
    for ra in a["runs"]:
        rb = runs_b.get(key(ra))
        row = rows.setdefault(
            (ra["press"], ra["dtype"], ra["ratio"]),
            {
                "prompts": 0,
                "same_kept": 0,
                "same_answer": 0,
                "heads_differ": 0,
                "heads": 0,
                "positions_differ": 0,
                "unsupported": ra.get("unsupported", ""),
                "first_diff": [],
            },
        )
        if rb is None or "unsupported" in ra or "unsupported" in rb:
            continue
        row["prompts"] += 1
        row["same_answer"] += ra["answer_ids"] == rb["answer_ids"]
        if ra["answer_ids"] != rb["answer_ids"]:
            row["first_diff"].append(f"{ra['prompt']}: {ra['answer']!r} / {rb['answer']!r}")
        field = "zeroed_channels" if "zeroed_channels" in ra else "kept"
        ka, kb = ra.get(field), rb.get(field)
        if not isinstance(ka, list):  # structural (quantized) or FullCache: every position stays
            row["same_kept"] += ka == kb
            continue
        same = True
        for la, lb in zip(ka, kb, strict=True):
            for ha, hb in zip(la, lb, strict=True):
                row["heads"] += 1
                if ha != hb:
                    same = False
                    row["heads_differ"] += 1
                    row["positions_differ"] += len(members(ha) ^ members(hb))
        row["same_kept"] += same
    print(
        f"{'press':<15}{'dtype':<10}{'ratio':>6}  same kept  same answer  heads differing"
        "  positions differing"
    )
    for (press, dtype, ratio), row in rows.items():
        if row["unsupported"]:
            print(f"{press:<15}{dtype:<10}{ratio:>6}  unsupported: {row['unsupported']}")
            continue
        n = row["prompts"]
        heads = f"{row['heads_differ']}/{row['heads']}" if row["heads"] else "-"
        print(
            f"{press:<15}{dtype:<10}{ratio:>6}  {row['same_kept']:>4}/{n:<4}  {row['same_answer']:>5}/{n:<5}"
            f"  {heads:>15}  {row['positions_differ']:>19}"
        )
        for diff in row["first_diff"]:
            print(f"{'':<33}answer {diff}")
    if args.json:
        summary = [{"press": p, "dtype": d, "ratio": r, **row} for (p, d, r), row in rows.items()]
        args.json.write_text(json.dumps({"kvpress": [va, vb], "rows": summary}, indent=1))


def key(run: dict[str, Any]) -> tuple[str, str, str, float]:
    return run["dtype"], run["prompt"], run["press"], run["ratio"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run every press in this environment's kvpress and write a JSON")
    r.add_argument("--model", type=Path, required=True, help="a causal LM folder with its tokenizer")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    r.add_argument("--presses", nargs="+", default=list(PRESSES), choices=PRESSES)
    r.add_argument("--ratios", nargs="+", type=float, default=list(RATIOS))
    r.add_argument("--prompts", type=int, default=len(LENGTHS), help=f"how many of {LENGTHS} tokens")
    r.add_argument("--max-new-tokens", type=int, default=12)
    r.add_argument("--threads", type=int, default=1)
    c = sub.add_parser("compare", help="diff two runs' kept positions and answers")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    c.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args(argv)
    (run if args.command == "run" else compare)(args)


if __name__ == "__main__":
    sys.exit(main())
