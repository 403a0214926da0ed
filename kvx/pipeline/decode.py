"""Decode stage: greedy decoding of caches that are already built — a source's FullCache control and
its compressed caches together in one batch (``kvx.pipeline.batched``), or one cache alone."""

from __future__ import annotations

from transformers import Cache

from kvx.modeling.compressed import CompressedRun
from kvx.modeling.costs import held_bytes
from kvx.modeling.generation import Generation, greedy_decode, question_logits
from kvx.modeling.layers import clear_head_masks
from kvx.modeling.reader import LoadedReader, attn_implementation
from kvx.pipeline.batched import DecodeJob, greedy_decode_batch


def decode_batch(reader: LoadedReader, decodes: list[DecodeJob]) -> list[Generation | Exception]:
    """Batches of jobs sharing their feed; a batch that fails is retried job by job, so an error
    belongs to the cache that caused it."""
    out: list[Generation | Exception | None] = [None] * len(decodes)
    by_feed: dict[bytes, list[int]] = {}
    for i, d in enumerate(decodes):
        by_feed.setdefault(d.feed.cpu().numpy().tobytes(), []).append(i)
    for members in by_feed.values():
        clear_head_masks(reader.model)
        try:
            gens = greedy_decode_batch(reader.model, reader.tokenizer, [decodes[i] for i in members])
        except Exception:
            gens = []
            for i in members:
                d = decodes[i]
                try:
                    gens.append(
                        greedy_decode(
                            reader.model, reader.tokenizer, d.cache, d.feed, d.start, d.max_new_tokens
                        )
                    )
                except Exception as exc:
                    gens.append(exc)
        for i, gen in zip(members, gens):
            out[i] = gen
    return out  # type: ignore[return-value]


def decode_compressed(
    reader: LoadedReader, run: CompressedRun, cache: Cache, max_new_tokens: int
) -> Generation:
    """One compressed answer alone, positions continuing from where compression says decoding starts;
    a press that compresses while decoding runs over it, the cache's bytes measured at every step."""
    model, comp = reader.model, run.compressor
    measure = held_bytes if comp.compresses_decoding else None
    with attn_implementation(model, run.decode_impl), comp.decode_under(model):
        gen = greedy_decode(model, reader.tokenizer, cache, run.feed, run.start, max_new_tokens, measure)
    run.first_logits = gen.first_logits
    return gen


def feed_question(reader: LoadedReader, run: CompressedRun, cache: Cache) -> None:
    """A decode's first step alone on a compressed cache: the question fed after it, its last logits
    kept as ``run.first_logits`` (the likelihood diagnostic's first-token prediction, and the cache it
    continues from), with no answer decoded: a finished cell's answers are already recorded."""
    model, comp = reader.model, run.compressor
    with attn_implementation(model, run.decode_impl), comp.decode_under(model):
        run.first_logits = question_logits(model, cache, run.feed, run.start)
