"""Greedy decoding on a prebuilt cache, the way kvpress's pipeline does it.

The question is fed with positions that continue from the ORIGINAL context length, whatever
the compressor left in the cache; decoding is greedy argmax until an end-of-sequence token or
``max_new_tokens``. Kept as our own loop (not the pipeline) because records need token ids.
"""

from __future__ import annotations

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


def eos_ids(model: PreTrainedModel) -> list[int]:
    eos = model.generation_config.eos_token_id
    if eos is None:
        return []
    return list(eos) if isinstance(eos, (list, tuple)) else [int(eos)]


@torch.inference_mode()
def greedy_decode(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    cache: Cache,
    feed_ids: torch.Tensor,
    start_position: int,
    max_new_tokens: int,
) -> Generation:
    """Feed ``feed_ids`` (question + answer prefix) after ``cache`` and decode greedily."""
    stop = set(eos_ids(model))
    position_ids = torch.arange(
        start_position, start_position + feed_ids.shape[1], device=feed_ids.device
    ).unsqueeze(0)
    out = model(input_ids=feed_ids, past_key_values=cache, position_ids=position_ids, logits_to_keep=1)
    first_logits = out.logits[0, -1]
    position = position_ids[:, -1:] + 1
    generated = [out.logits[0, -1].argmax()]
    stop_reason = "eos" if int(generated[-1]) in stop else "max_new_tokens"
    for i in range(max_new_tokens - 1):
        if stop_reason == "eos":
            break
        out = model(input_ids=generated[-1].view(1, 1), past_key_values=cache, position_ids=position + i)
        generated.append(out.logits[0, -1].argmax())
        if int(generated[-1]) in stop:
            stop_reason = "eos"
    ids = [int(t) for t in generated]
    return Generation(ids, tokenizer.decode(ids, skip_special_tokens=True), stop_reason, first_logits)
