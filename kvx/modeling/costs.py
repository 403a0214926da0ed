"""What an answer cost: the bytes its KV cache held, and how long its decode took.

"Retained share" is what a compressor was asked to keep; bytes are what its cache holds. They part
ways for a quantized cache (packed codes plus per-group scales and zeros plus a full-precision
residual), for AdaKV (masked keys stay in memory), for ThinK (pruned key channels are zeroed, not
removed) and for PyramidKV (layers of different lengths). So the bytes are counted from the
tensors the cache holds when decoding starts, whatever their type, and the held bytes that
attention ignores (masked positions, zeroed channels) are counted beside them.

Timings are what this machine did this time: they go into records and cell metrics, never into a
cell's identity or a validation check.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from typing import Any

import torch
from transformers import Cache, PreTrainedModel
from transformers.cache_utils import DynamicLayer

from kvx.modeling.generation import Generation
from kvx.modeling.layers import attention_layers


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    """Tensors inside a layer attribute: itself, or inside tuples, lists and dicts (HQQ keeps
    ``(packed codes, {"scale": ..., "zero": ...})``)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def held_bytes(cache: Cache) -> int:
    """Bytes of every tensor the cache's layers hold (each tensor once: its elements, not a larger
    buffer it may be a view of)."""
    seen: set[tuple] = set()
    total = 0
    for layer in cache.layers:
        for t in _tensors(vars(layer)):
            key = (t.data_ptr(), t.dtype, tuple(t.shape), t.stride())
            if t.numel() and key not in seen:
                seen.add(key)
                total += t.numel() * t.element_size()
    return total


def masked_bytes(cache: Cache, model: PreTrainedModel) -> int:
    """Held bytes attention does not use: the K and V rows of positions masked per head (AdaKV's
    ``masked_key_indices`` on the attention modules) and key channels that are zero at every
    position of a head (ThinK zeroes the channels it prunes)."""
    total = 0
    modules = attention_layers(model)
    for idx, layer in enumerate(cache.layers):
        if type(layer) is not DynamicLayer or not layer.is_initialized or layer.keys.dim() != 4:
            continue
        keys, values = layer.keys, layer.values
        row = keys.shape[-1] * keys.element_size() + values.shape[-1] * values.element_size()
        masked = getattr(modules[idx], "masked_key_indices", None) if idx < len(modules) else None
        if masked is not None:
            total += int(masked[2].numel()) * row
        # a channel zero at every position is zero at the first: only then read them all
        if keys.shape[-2] > 1 and bool((keys[..., 0, :] == 0).any()):
            zero_channels = int((keys == 0).all(dim=-2).sum())
            total += zero_channels * keys.shape[-2] * keys.element_size()
    return total


def cache_cost(cache: Cache, model: PreTrainedModel | None = None) -> dict[str, Any]:
    """``kv_bytes`` held when decoding starts, and with the model the ``masked_share`` of them."""
    held = held_bytes(cache)
    out: dict[str, Any] = {"kv_bytes": held}
    if model is not None:
        out["masked_share"] = min(masked_bytes(cache, model), held) / held if held else 0.0
    return out


def decode_cost(gen: Generation) -> dict[str, Any]:
    """The decode's timings: the question's forward, the median later step, tokens, batch rows."""
    out = {
        "question_ms": round(gen.question_ms, 3),
        "decode_ms_per_token": round(statistics.median(gen.step_ms), 3) if gen.step_ms else None,
        "new_tokens": len(gen.token_ids),
        "decode_rows": gen.rows,
    }
    if gen.kv_bytes:  # a cache compressed while decoding: its size over the steps
        out["kv_bytes_decode_peak"] = max(gen.kv_bytes)
        out["kv_bytes_decode_mean"] = round(statistics.fmean(gen.kv_bytes), 1)
        out["kv_bytes_decode_end"] = gen.kv_bytes[-1]
    return out
