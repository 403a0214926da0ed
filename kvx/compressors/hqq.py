"""Transformers' HQQ-quantized KV cache (KVDiagnosis Table 7: group 64, residual 128).

Bits come from ``press.bits``; without it the paper's mapping of the 75/50/25 retained labels
applies (ratio 0.25 -> 8 bits, 0.5 -> 4, 0.75 -> 2) and other ratios are unsupported. The
retained share is bits / 16 of a 16-bit cache.

HQQ quantizes each (1, kv_heads, tokens, head_dim) key or value tensor flattened into groups of
``group_size`` and bit-packs the grouped matrix's rows; a group size that fits one token's
``kv_heads * head_dim`` elements (``groups_fit``) works at every length, any other fails on some
context or decode lengths, so it is unsupported for the reader before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from kvx.compressors.base import Compressor
from kvx.core.checks import check_choice, check_int
from kvx.core.setting import RetainedMap, Setting
from kvx.modeling.layers import attention_layers

if TYPE_CHECKING:
    import torch
    from transformers import Cache, PreTrainedModel, QuantizedCache

    from kvx.modeling.capture import Capture

BITS = (2, 4, 8)
RATIO_TO_BITS = {0.25: 8, 0.5: 4, 0.75: 2}


@dataclass
class HQQCache(Compressor):
    """``press=hqq press.bits=4`` or ``press=hqq ratio=0.5``."""

    bits: int | None = None
    group_size: int = 64
    residual_length: int = 128
    axis_key: int = 0
    axis_value: int = 0
    fast_path: ClassVar[bool] = True
    budget_unsupported: ClassVar[str] = (
        "HQQ quantizes every token and keeps them all: a token budget does not apply (use press.bits)"
    )

    @property
    def ratio_unused(self) -> bool:  # type: ignore[override]
        return self.bits is not None  # press.bits fixes the cache; the ratio is not used

    def validate(self) -> None:
        if self.bits is not None:
            check_choice("press.bits", self.bits, BITS)
        check_int("press.group_size", self.group_size, 1)
        check_int("press.residual_length", self.residual_length, 0)
        check_choice("press.axis_key", self.axis_key, (0, 1))
        check_choice("press.axis_value", self.axis_value, (0, 1))

    def resolved_bits(self, ratio: float) -> int | None:
        return self.bits if self.bits is not None else RATIO_TO_BITS.get(round(ratio, 6))

    def setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        bits = self.resolved_bits(ratio)
        params = {"bits": bits, "group_size": self.group_size, "residual_length": self.residual_length}
        if bits is None:
            reason = f"ratio={ratio} has no HQQ bit width; use ratio in {sorted(RATIO_TO_BITS)} or press.bits"
            return Setting(ratio, None, params, False, reason)
        reason = self.shape_reason(model, bits)
        if reason:
            return Setting(ratio, None, params, False, reason)
        return Setting(ratio, bits / 16, params)

    def shape_reason(self, model: PreTrainedModel, bits: int) -> str:
        """Why this reader's cache cannot take the group size ("" when it can)."""
        return shape_reason(model, bits, self.group_size, {self.axis_key, self.axis_value})

    def _cache(self, model: PreTrainedModel, ratio: float) -> QuantizedCache:
        from transformers import QuantizedCache

        return QuantizedCache(
            backend="hqq",
            config=model.config,
            nbits=self.resolved_bits(ratio),
            axis_key=self.axis_key,
            axis_value=self.axis_value,
            q_group_size=self.group_size,
            residual_length=self.residual_length,
        )

    def prefill(self, model: PreTrainedModel, context_ids: torch.Tensor, ratio: float) -> Cache:
        cache = self._cache(model, ratio)
        model.model(input_ids=context_ids, past_key_values=cache)
        return cache

    def compress_captured(self, model: PreTrainedModel, capture: Capture, ratio: float) -> Cache:
        # A prefill's first update of each layer quantizes exactly the captured K/V.
        cache = self._cache(model, ratio)
        for idx, layer in enumerate(capture.layers):
            cache.update(layer.keys, layer.values, idx)
        return cache

    def retained_map(
        self, model: PreTrainedModel, cache: Cache, capture: Capture | None, ratio: float
    ) -> RetainedMap:
        return RetainedMap("structural", reason="quantization keeps every position at lower precision")


def shape_reason(model: PreTrainedModel, bits: int, group_size: int, axes: set[int]) -> str:
    """Why this reader's cache cannot take HQQ's ``group_size`` ("" when it can): decided before
    compute, since HQQ fails only on the context and decode lengths that do not fit it."""
    for module in attention_layers(model):
        kv_heads, head_dim = module.config.num_key_value_heads, module.head_dim
        per_token = kv_heads * head_dim
        if not groups_fit(per_token, group_size, bits, axes):
            working = [g for g in range(1, per_token + 1) if groups_fit(per_token, g, bits, axes)]
            return (
                f"press.group_size={group_size} does not split the {per_token} key/value "
                f"elements one token adds to a layer ({kv_heads} KV heads x head_dim {head_dim}) "
                f"into whole {bits}-bit HQQ groups, so some context lengths would fail; group "
                f"sizes that work for this reader: {', '.join(map(str, working))}"
            )
    return ""


def groups_fit(per_token: int, group_size: int, bits: int, axes: set[int]) -> bool:
    """Whether HQQ quantizes a (1, kv_heads, n, head_dim) tensor for every n, with ``per_token``
    = kv_heads * head_dim: the flattened tensor must be whole groups, and the grouped matrix's rows
    (``group_size`` on axis 0, the group count on axis 1) whole bytes of ``8 // bits`` packed rows."""
    if per_token % group_size:
        return False
    rows = {0: group_size, 1: per_token // group_size}
    return all(rows[axis] % (8 // bits) == 0 for axis in axes)
