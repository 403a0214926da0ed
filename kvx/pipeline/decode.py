"""Decode stage: greedy decoding of the FullCache control and of a compressed cache."""

from __future__ import annotations

from transformers import Cache

from kvx.modeling.capture import Capture
from kvx.modeling.compressed import CompressedRun
from kvx.modeling.generation import Generation, greedy_decode
from kvx.modeling.layers import clear_head_masks
from kvx.modeling.reader import LoadedReader, Prompt, attn_implementation


def decode_control(reader: LoadedReader, capture: Capture, prompt: Prompt, max_new_tokens: int) -> Generation:
    """The uncompressed answer: the question fed after the full captured prefill."""
    clear_head_masks(reader.model)  # an earlier AdaKV cell's masks must not reach the control
    return greedy_decode(
        reader.model,
        reader.tokenizer,
        capture.full_cache(),
        prompt.question_ids,
        capture.n_tokens,
        max_new_tokens,
    )


def decode_compressed(
    reader: LoadedReader, run: CompressedRun, cache: Cache, max_new_tokens: int
) -> Generation:
    """The compressed answer, positions continuing from where compression says decoding starts."""
    with attn_implementation(reader.model, run.decode_impl):
        gen = greedy_decode(reader.model, reader.tokenizer, cache, run.feed, run.start, max_new_tokens)
    run.first_logits = gen.first_logits
    return gen
