"""The uncompressed FullCache: the control every compressed cell is paired with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
from transformers import DynamicCache

from kvx.compressors.base import Compressor, RetainedMap, Setting

if TYPE_CHECKING:
    from transformers import Cache, PreTrainedModel

    from kvx.capture import Capture


@dataclass
class NoCompression(Compressor):
    """Keep every entry. With ``press=none`` a cell reports the control itself (no pairs)."""

    fast_path: ClassVar[bool] = True

    def setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        return Setting(ratio=0.0, retained_share=1.0, method_parameter={"kept_tokens_per_head": n_context})

    def prefill(self, model: PreTrainedModel, context_ids: torch.Tensor, ratio: float) -> Cache:
        cache = DynamicCache()
        model.model(input_ids=context_ids, past_key_values=cache)
        return cache

    def compress_captured(self, model: PreTrainedModel, capture: Capture, ratio: float) -> Cache:
        return capture.full_cache()

    def retained_map(
        self, model: PreTrainedModel, cache: Cache, capture: Capture | None, ratio: float
    ) -> RetainedMap:
        n_slots = len(cache.layers) * cache.layers[0].keys.shape[1]
        return RetainedMap("measured", torch.ones(n_slots, cache.layers[0].keys.shape[2], dtype=torch.bool))
