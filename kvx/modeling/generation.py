"""Greedy decoding on a prebuilt cache, the way kvpress's pipeline does it.

The question is fed with positions that continue from the ORIGINAL context length, whatever
the compressor left in the cache; decoding is greedy argmax until an end-of-sequence token or
``max_new_tokens``. Kept as our own loop (not the pipeline) because records need token ids.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from transformers import Cache, PreTrainedModel, PreTrainedTokenizerBase


@dataclass
class Generation:
    token_ids: list[int]
    text: str
    stop_reason: str  # "eos" | "max_new_tokens"
    #: logits after the last fed token: the teacher-forced prediction of a reference's first token
    first_logits: torch.Tensor | None = field(default=None, repr=False)
    #: wall milliseconds of the forward that fed the question, and of each later step
    question_ms: float = 0.0
    step_ms: list[float] = field(default_factory=list)
    rows: int = 1  # rows of the batched forward that decoded it (its timings are the batch's)
    #: the cache's bytes after the question's forward and after each later step, where the decode
    #: compresses it (kvpress's decoding presses); None where the cache only grows
    kv_bytes: list[int] | None = None


def eos_ids(model: PreTrainedModel) -> list[int]:
    eos = model.generation_config.eos_token_id
    if eos is None:
        return []
    return list(eos) if isinstance(eos, (list, tuple)) else [int(eos)]


@torch.inference_mode()
def question_logits(
    model: PreTrainedModel, cache: Cache, feed_ids: torch.Tensor, start_position: int
) -> torch.Tensor:
    """Feed ``feed_ids`` after ``cache`` (positions from ``start_position``) and return the logits after
    the last one: a decode's first step, which diagnostics also take alone on a finished cell's cache."""
    position_ids = torch.arange(
        start_position, start_position + feed_ids.shape[1], device=feed_ids.device
    ).unsqueeze(0)
    out = model(input_ids=feed_ids, past_key_values=cache, position_ids=position_ids, logits_to_keep=1)
    return out.logits[0, -1]


@torch.inference_mode()
def greedy_decode(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    cache: Cache,
    feed_ids: torch.Tensor,
    start_position: int,
    max_new_tokens: int,
    measure: Callable[[Cache], int] | None = None,
) -> Generation:
    """Feed ``feed_ids`` (question + answer prefix) after ``cache`` and decode greedily; with
    ``measure``, the cache's size after every forward goes into ``Generation.kv_bytes``."""
    stop = set(eos_ids(model))
    started = time.perf_counter()
    first_logits = question_logits(model, cache, feed_ids, start_position)
    sizes = None if measure is None else [measure(cache)]
    position = torch.tensor([[start_position + feed_ids.shape[1]]], device=feed_ids.device)
    generated = [first_logits.argmax()]
    stop_reason = "eos" if int(generated[-1]) in stop else "max_new_tokens"
    question_ms, step_ms = 1000 * (time.perf_counter() - started), []
    for i in range(max_new_tokens - 1):
        if stop_reason == "eos":
            break
        started = time.perf_counter()
        out = model(input_ids=generated[-1].view(1, 1), past_key_values=cache, position_ids=position + i)
        generated.append(out.logits[0, -1].argmax())
        if int(generated[-1]) in stop:  # int() waits for the device: the step's time is complete
            stop_reason = "eos"
        step_ms.append(1000 * (time.perf_counter() - started))
        if sizes is not None and measure is not None:
            sizes.append(measure(cache))
    ids = [int(t) for t in generated]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    return Generation(ids, text, stop_reason, first_logits, question_ms, step_ms, kv_bytes=sizes)
