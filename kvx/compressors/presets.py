"""The evaluated methods with KVDiagnosis Table 7 settings as defaults (kvpress 0.5.x presses).

``ratio`` is always kvpress's compression ratio (fraction removed); each preset records the
retained share and the parameter the method actually ran with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from kvx.compressors.kvpress_adapter import KVPressCompressor
from kvx.core.checks import check_int
from kvx.core.errors import ConfigError
from kvx.core.setting import RetainedMap, Setting
from kvx.modeling.layers import attention_layers, compressed_layers

if TYPE_CHECKING:
    from kvpress.presses.base_press import BasePress
    from transformers import Cache, PreTrainedModel

    from kvx.modeling.capture import Capture


@dataclass
class StreamingLLM(KVPressCompressor):
    """Attention sinks plus the most recent tokens; ``n_sink`` sinks always stay."""

    scorer: ClassVar[bool] = True

    n_sink: int = 4

    def validate(self) -> None:
        check_int("press.n_sink", self.n_sink, 0)

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import StreamingLLMPress

        return StreamingLLMPress(compression_ratio=ratio, n_sink=self.n_sink)


@dataclass
class SnapKV(KVPressCompressor):
    """Observation-window attention, pooled; the window itself is always kept."""

    scorer: ClassVar[bool] = True

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

    scorer: ClassVar[bool] = True

    ratio_free_scores: ClassVar[bool] = True

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import TOVAPress

        return TOVAPress(compression_ratio=ratio)


@dataclass
class KeyDiff(KVPressCompressor):
    """Key-similarity eviction (keeps keys least similar to the mean key)."""

    scorer: ClassVar[bool] = True

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
class PyramidKV(KVPressCompressor):
    """Layer budgets shrinking with depth over SnapKV scores. Layers end with different cache
    lengths, so the engine decodes it on kvx's per-layer causal attention (CPU and GPU)."""

    scorer: ClassVar[bool] = True

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
