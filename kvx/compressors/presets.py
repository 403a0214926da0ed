"""The evaluated methods with KVDiagnosis Table 7 settings as defaults (kvpress 0.5.x presses).

``ratio`` is always kvpress's compression ratio (fraction removed); each preset records the
retained share and the parameter the method actually ran with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from kvx.compressors.kvpress_adapter import KVPressCompressor
from kvx.core.checks import check_int, check_number
from kvx.core.errors import ConfigError
from kvx.core.setting import RetainedMap, Setting, n_kept
from kvx.modeling.layers import attention_layers, compressed_flags, compressed_layers

if TYPE_CHECKING:
    import torch
    from kvpress.presses.base_press import BasePress
    from transformers import Cache, PreTrainedModel

    from kvx.modeling.capture import Capture


@dataclass
class StreamingLLM(KVPressCompressor):
    """Attention sinks plus the most recent tokens; ``n_sink`` sinks always stay."""

    n_sink: int = 4

    def validate(self) -> None:
        check_int("press.n_sink", self.n_sink, 0)

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import StreamingLLMPress

        return StreamingLLMPress(compression_ratio=ratio, n_sink=self.n_sink)


@dataclass
class SnapKV(KVPressCompressor):
    """Observation-window attention, pooled; the window itself is always kept."""

    ratio_free_scores: ClassVar[bool] = True

    window_size: int = 64
    kernel_size: int = 5

    def validate(self) -> None:
        check_window(self.window_size, self.kernel_size)

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import SnapKVPress

        return SnapKVPress(
            compression_ratio=ratio, window_size=self.window_size, kernel_size=self.kernel_size
        )

    def press_setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        if ratio > 0 and n_context <= self.window_size:
            return Setting(ratio, None, self.press_fields(), False, self._short(n_context))
        return super().press_setting(ratio, n_context, model)

    def _short(self, n_context: int) -> str:
        return f"context of {n_context} tokens is not longer than window_size={self.window_size}"


@dataclass
class TOVA(KVPressCompressor):
    """Current-query attention; the same positions for every head of a layer."""

    ratio_free_scores: ClassVar[bool] = True

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import TOVAPress

        return TOVAPress(compression_ratio=ratio)


@dataclass
class KeyDiff(KVPressCompressor):
    """Key-similarity eviction (keeps keys least similar to the mean key)."""

    ratio_free_scores: ClassVar[bool] = True

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import KeyDiffPress

        return KeyDiffPress(compression_ratio=ratio)


@dataclass
class ThinK(KVPressCompressor):
    """Key-channel pruning. Only keys shrink, so the overall ratio is half the channel ratio and
    ratios above 0.5 are out of its reach (recorded as unsupported, never run otherwise)."""

    window_size: int = 32
    mutates_keys: ClassVar[bool] = True
    budget_unsupported: ClassVar[str] = "ThinK prunes key channels, not tokens: a token budget does not apply"

    def validate(self) -> None:
        check_int("press.window_size", self.window_size, 1)

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import ThinKPress

        return ThinKPress(key_channel_compression_ratio=2 * ratio, window_size=self.window_size)

    def press_setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        channel_ratio = 2 * ratio
        params = {"window_size": self.window_size, "key_channel_compression_ratio": channel_ratio}
        if channel_ratio > 1:
            reason = (
                f"ThinK prunes key channels only: ratio={ratio} needs {channel_ratio:.2f} of key channels"
            )
            return Setting(ratio, None, params, False, reason + " removed (at most 1.0)")
        head_dim = attention_layers(model)[0].head_dim
        params["key_channels_kept"] = head_dim - int(head_dim * channel_ratio)
        params["head_dim"] = head_dim
        return Setting(ratio, 1 - ratio, params)

    def retained_map(
        self, model: PreTrainedModel, cache: Cache, capture: Capture | None, ratio: float
    ) -> RetainedMap:
        return RetainedMap("structural", reason="ThinK prunes key channels: every position stays addressable")


@dataclass
class ChunkKV(KVPressCompressor):
    """Whole chunks of ``chunk_length`` tokens, scored by a K-norm base press."""

    chunk_length: int = 20

    def budget_ratio(self, budget: int, n_context: int) -> float:
        """Whole chunks: the ratio that keeps ``budget // chunk_length`` chunks (at least one)."""
        n_chunks = -(-n_context // self.chunk_length)
        kept = max(1, budget // self.chunk_length)
        return 0.0 if kept >= n_chunks else 1.0 - (kept + 0.5) / n_chunks

    def validate(self) -> None:
        check_int("press.chunk_length", self.chunk_length, 1)

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import ChunkKVPress, KnormPress

        return ChunkKVPress(press=KnormPress(compression_ratio=ratio), chunk_length=self.chunk_length)

    def press_setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        complete, rest = divmod(n_context, self.chunk_length)
        if complete == 0 or ratio == 0:
            return super().press_setting(ratio, n_context, model)
        n_chunks = complete + (rest > 0)
        kept_chunks = max(1, int(n_chunks * (1 - ratio)))
        # the partial last chunk is kept only when it scores among the top chunks: the exact
        # count is known after scoring; report the bound with full chunks
        kept = kept_chunks * self.chunk_length
        params = {"chunk_length": self.chunk_length, "base": "knorm", "chunks_kept": kept_chunks}
        params["kept_tokens_upper_bound"] = min(n_context, kept)
        return Setting(ratio, min(n_context, kept) / n_context, params)

    def retained_map(
        self, model: PreTrainedModel, cache: Cache, capture: Capture | None, ratio: float
    ) -> RetainedMap:
        """Projected: the kept chunks' token positions, found by matching kept key rows."""
        import torch

        if capture is None:
            return RetainedMap("not_applicable", reason="ChunkKV's map needs the captured prefill")
        rows, order = [], []
        for idx, layer in enumerate(capture.layers):
            kept = cache.layers[idx].keys[0, 0]
            positions = match_rows(kept, layer.keys[0, 0])
            if positions is None:
                return RetainedMap(
                    "not_applicable", reason=f"kept keys of layer {idx} do not match unique rows"
                )
            row = torch.zeros(layer.keys.shape[2], dtype=torch.bool)
            row[positions] = True
            rows.extend([row] * layer.keys.shape[1])  # ChunkKV keeps the same chunks in every head
            order.append(torch.tensor(positions).expand(layer.keys.shape[1], -1))
        return RetainedMap("projected", torch.stack(rows), rows=order, compressed=compressed_flags(model))


@dataclass
class AdaKV(KVPressCompressor):
    """Head-wise budgets over a SnapKV base; masks keys per head instead of shrinking the cache."""

    window_size: int = 64
    kernel_size: int = 5
    alpha_safeguard: float = 0.2

    def validate(self) -> None:
        check_window(self.window_size, self.kernel_size)
        check_number("press.alpha_safeguard", self.alpha_safeguard, 0.0, 1.0)

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import AdaKVPress, SnapKVPress

        base = SnapKVPress(
            compression_ratio=ratio, window_size=self.window_size, kernel_size=self.kernel_size
        )
        return AdaKVPress(press=base, alpha_safeguard=self.alpha_safeguard)

    def press_setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        if ratio > 0 and n_context <= self.window_size:
            reason = f"context of {n_context} tokens is not longer than window_size={self.window_size}"
            return Setting(ratio, None, self.press_fields(), False, reason)
        kept = n_kept(n_context, ratio) if ratio > 0 else n_context
        params = {"mean_kept_tokens_per_head": kept, **self.press_fields()}
        return Setting(ratio, kept / n_context, params)

    def retained_map(
        self, model: PreTrainedModel, cache: Cache, capture: Capture | None, ratio: float
    ) -> RetainedMap:
        """Measured per head: every position except the ones AdaKV masked in that head."""
        import torch

        modules = attention_layers(model)
        heads, n = cache.layers[0].keys.shape[1], cache.layers[0].keys.shape[2]
        mask = torch.ones(len(modules) * heads, n, dtype=torch.bool)
        for idx, module in enumerate(modules):
            masked = getattr(module, "masked_key_indices", None)
            if masked is not None:
                _, head, pos = masked
                mask[idx * heads + head.cpu(), pos.cpu()] = False
        return RetainedMap("measured", mask, compressed=compressed_flags(model))


@dataclass
class PyramidKV(KVPressCompressor):
    """Layer budgets shrinking with depth over SnapKV scores. Layers end with different cache
    lengths, so the engine decodes it on kvx's per-layer causal attention (CPU and GPU)."""

    window_size: int = 64
    kernel_size: int = 5
    beta: int = 20

    def validate(self) -> None:
        check_window(self.window_size, self.kernel_size)
        check_int("press.beta", self.beta, 1)

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import PyramidKVPress

        return PyramidKVPress(
            compression_ratio=ratio,
            window_size=self.window_size,
            kernel_size=self.kernel_size,
            beta=self.beta,
        )

    def press_setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        if ratio > 0 and n_context <= self.window_size:
            reason = f"context of {n_context} tokens is not longer than window_size={self.window_size}"
            return Setting(ratio, None, self.press_fields(), False, reason)
        if ratio == 0:
            return super().press_setting(ratio, n_context, model)
        press, modules = self.build_press(ratio), attention_layers(model)
        budgets = [press.get_layer_budget(modules[idx], n_context) for idx in compressed_layers(model)]
        params = {"kept_tokens_per_layer": budgets, **self.press_fields()}
        return Setting(ratio, sum(budgets) / (len(budgets) * n_context), params)


def check_window(window_size: int, kernel_size: int) -> None:
    """SnapKV-style scoring: a window of at least one query, pooled with an odd kernel (an even one
    lengthens the pooled scores by one and kvpress's reshape fails)."""
    check_int("press.window_size", window_size, 1)
    if check_int("press.kernel_size", kernel_size, 1) % 2 == 0:
        raise ConfigError(f"press.kernel_size={kernel_size} must be odd")


def match_rows(kept: torch.Tensor, full: torch.Tensor) -> list[int] | None:
    """Original row index of each kept row (exact equality), or None if any is missing/ambiguous."""
    equal = (kept[:, None, :] == full[None, :, :]).all(-1)
    if not bool((equal.sum(-1) == 1).all()):
        return None
    return equal.float().argmax(-1).tolist()
