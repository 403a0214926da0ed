"""Capture one full prefill (each layer's attention input, rotary embeddings and K/V) so every
compressor cell can reuse it instead of running the context through the model again.

Captured prefills are kept in a process-wide LRU bounded in bytes: the basic launcher runs
all cells of a sweep in one process, so a source prefilled for the first cell serves the rest.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer

from kvx.core.lru import ByteLRU
from kvx.modeling.layers import attention_layers


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
    #: (press config, layer) -> the press's scores: ratio-free presses score a capture once (one
    #: value per position and KV head, added after the LRU sized the capture, so not counted there)
    scores: dict[tuple[str, int], torch.Tensor] = field(default_factory=dict)
    seconds: float = 0.0  # the prefill's wall time, for the records of every cell it serves

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
        """The uncompressed cache of this prefill, over the captured tensors themselves."""
        return cache_over((layer.keys, layer.values) for layer in self.layers)


def cache_over(layers: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> DynamicCache:
    """A DynamicCache whose layers hold these K/V tensors, not copies (``DynamicCache.update``
    copies: at 4k tokens, a capture's worth per cache built)."""
    cache = DynamicCache()
    for keys, values in layers:
        append_layer(cache, keys, values)
    return cache


def append_layer(cache: DynamicCache, keys: torch.Tensor, values: torch.Tensor) -> None:
    """Add the next layer holding ``keys``/``values`` themselves. Decoding never writes into them:
    it concatenates (``DynamicLayer.update``) or appends to a buffer of its own (batched decoding)."""
    layer = DynamicLayer()
    layer.lazy_initialization(keys, values)
    layer.keys, layer.values = keys.contiguous(), values.contiguous()
    cache.layers.append(layer)


def ids_digest(ids: torch.Tensor) -> str:
    """Content key of a token-id tensor (captured prefills, shared compressed contexts)."""
    return hashlib.sha256(ids.detach().cpu().to(torch.int64).numpy().tobytes()).hexdigest()


class _AllLayersSeen(Exception):
    """Raised once every attention layer has run: what follows (the last MLP, the final norm)
    shapes no key or value, so a capture does not compute it."""


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
        if len(found) == len(modules):
            raise _AllLayersSeen

    handles = [m.register_forward_hook(hook, with_kwargs=True) for m in modules]
    cache = DynamicCache()
    started = time.perf_counter()
    try:
        model.model(input_ids=context_ids, past_key_values=cache)
    except _AllLayersSeen:
        pass
    finally:
        for h in handles:
            h.remove()
    layers = [
        LayerCapture(found[i][0], cache.layers[i].keys, cache.layers[i].values, found[i][1])
        for i in range(len(modules))
    ]
    return Capture(layers=layers, cache_position=found[0][2], seconds=time.perf_counter() - started)


class CaptureCache(ByteLRU[Capture]):
    """LRU of captured prefills keyed by (reader, prefill ids), bounded by ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(max_bytes, Capture.nbytes)
