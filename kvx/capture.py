"""Capture one full prefill (each layer's attention input, rotary embeddings and K/V) so every
compressor cell can reuse it instead of running the context through the model again.

Captured prefills are kept in a process-wide LRU bounded in bytes: the basic launcher runs
all cells of a sweep in one process, so a source prefilled for the first cell serves the rest.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel

from kvx.compressors.kvpress_adapter import attention_layers


@dataclass
class LayerCapture:
    hidden_states: torch.Tensor  # (1, n, hidden): input of the attention module
    keys: torch.Tensor  # (1, kv_heads, n, head_dim), post-RoPE, as stored in the cache
    values: torch.Tensor
    #: (cos, sin) this layer's attention received: models mixing layer types (Gemma3's local and
    #: global layers) rotate each type with its own base, so layer 0's would be wrong elsewhere
    position_embeddings: tuple[torch.Tensor, torch.Tensor]


@dataclass
class Capture:
    layers: list[LayerCapture]
    cache_position: torch.Tensor
    last_logits: torch.Tensor | None = None

    @property
    def n_tokens(self) -> int:
        return int(self.layers[0].keys.shape[2])

    def nbytes(self) -> int:
        """Bytes held, counting once the rotary tensors that layers of one type share."""
        tensors = {
            id(t): t
            for layer in self.layers
            for t in (layer.hidden_states, layer.keys, layer.values, *layer.position_embeddings)
        }
        return sum(t.numel() * t.element_size() for t in tensors.values())

    def full_cache(self) -> DynamicCache:
        """The uncompressed cache of this prefill (shares storage: decoding appends new tensors)."""
        cache = DynamicCache()
        for idx, layer in enumerate(self.layers):
            cache.update(layer.keys, layer.values, idx)
        return cache


@torch.inference_mode()
def capture_prefill(model: PreTrainedModel, context_ids: torch.Tensor) -> Capture:
    """Prefill ``context_ids`` once without compression and keep what compressors need."""
    modules = attention_layers(model)
    found: dict[int, tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor], torch.Tensor]] = {}

    def hook(module: torch.nn.Module, args: tuple, kwargs: dict, output: object) -> None:
        found[module.layer_idx] = (
            kwargs["hidden_states"],
            kwargs["position_embeddings"],
            kwargs["cache_position"],
        )

    handles = [m.register_forward_hook(hook, with_kwargs=True) for m in modules]
    cache = DynamicCache()
    try:
        model.model(input_ids=context_ids, past_key_values=cache)
    finally:
        for h in handles:
            h.remove()
    layers = [
        LayerCapture(found[i][0], cache.layers[i].keys, cache.layers[i].values, found[i][1])
        for i in range(len(modules))
    ]
    return Capture(layers=layers, cache_position=found[0][2])


class CaptureCache:
    """LRU of captured prefills keyed by prompt hash, bounded by ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, Capture] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> Capture | None:
        item = self._items.get(key)
        if item is None:
            self.misses += 1
            return None
        self.hits += 1
        self._items.move_to_end(key)
        return item

    def put(self, key: str, capture: Capture) -> None:
        if capture.nbytes() > self.max_bytes:
            return  # larger than the whole budget: recompute instead of evicting everything
        self._items[key] = capture
        self._items.move_to_end(key)
        while sum(c.nbytes() for c in self._items.values()) > self.max_bytes:
            self._items.popitem(last=False)

    def clear(self) -> None:
        self._items.clear()
