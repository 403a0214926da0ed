"""The uncompressed FullCache: the control every compressed cell is paired with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from kvx.compressors.base import Compressor
from kvx.core.identity import SettingSpec
from kvx.core.setting import RetainedMap, Setting

if TYPE_CHECKING:
    import torch
    from transformers import Cache, PreTrainedModel

    from kvx.modeling.capture import Capture


@dataclass
class NoCompression(Compressor):
    """Keep every entry. With ``press=none`` a cell reports the control itself (no pairs)."""

    fast_path: ClassVar[bool] = True
    keeps_everything: ClassVar[bool] = True

    def setting_spec(self, ratio: float, budget_tokens: int | None) -> SettingSpec:
        return SettingSpec("none", None)  # keeps everything whatever is asked: one cell

    def setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        return Setting(ratio=0.0, retained_share=1.0, method_parameter={"kept_tokens_per_head": n_context})

    def prefill(self, model: PreTrainedModel, context_ids: torch.Tensor, ratio: float) -> Cache:
        from transformers import DynamicCache

        cache = DynamicCache()
        model.model(input_ids=context_ids, past_key_values=cache)
        return cache

    def compress_captured(self, model: PreTrainedModel, capture: Capture, ratio: float) -> Cache:
        return capture.full_cache()

    def retained_map(
        self, model: PreTrainedModel, cache: Cache, capture: Capture | None, ratio: float
    ) -> RetainedMap:
        import torch

        n_slots = len(cache.layers) * cache.layers[0].keys.shape[1]
        return RetainedMap("measured", torch.ones(n_slots, cache.layers[0].keys.shape[2], dtype=torch.bool))
