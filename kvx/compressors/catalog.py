"""Every other offline-capable kvpress press, by name, with the press's own defaults.

Each entry is a generated dataclass whose fields mirror the press's plain-valued fields, so
``press=knorm`` and ``press=expected_attention press.n_sink=8`` work like the presets. Presses
that fetch hub artefacts (DuoAttention, Q-Filters, KVzap, ...) are not listed: they cannot run
offline and would only fail later.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvpress import (
    BlockPress,
    CompactorPress,
    CURPress,
    ExpectedAttentionPress,
    KeyRerotationPress,
    KnormPress,
    LagKVPress,
    LeverageScorePress,
    NonCausalAttnPress,
    ObservedAttentionPress,
    RandomPress,
)
from kvpress.presses.base_press import BasePress

from kvx.compressors.kvpress_adapter import KVPressCompressor, scorer_press_compressor

knorm = scorer_press_compressor("Knorm", KnormPress)
# RandomPress draws from torch's RNG: a captured replay would draw differently from the hook.
random = scorer_press_compressor("Random", RandomPress, fast_path=False, seed=0)
expected_attention = scorer_press_compressor("ExpectedAttention", ExpectedAttentionPress)
# needs the attention weights, which only the eager implementation returns
observed_attention = scorer_press_compressor(
    "ObservedAttention", ObservedAttentionPress, fast_path=False, attn="eager"
)
lagkv = scorer_press_compressor("LagKV", LagKVPress)
cur = scorer_press_compressor("CUR", CURPress)
# random sketches: a replay on captured inputs draws a different sketch than the hook did
leverage = scorer_press_compressor("LeverageScore", LeverageScorePress, fast_path=False)
compactor = scorer_press_compressor("Compactor", CompactorPress, fast_path=False)
non_causal_attention = scorer_press_compressor("NonCausalAttn", NonCausalAttnPress)


@dataclass
class block(KVPressCompressor):  # noqa: N801 - registered names are the kvx names
    """Block-wise K-norm scoring (BlockPress over KnormPress)."""

    block_size: int = 128

    def build_press(self, ratio: float) -> BasePress:
        return BlockPress(press=KnormPress(compression_ratio=ratio), block_size=self.block_size)


@dataclass
class key_rerotation(KVPressCompressor):  # noqa: N801
    """K-norm eviction, then keys re-rotated to contiguous positions: decoding continues from
    the compressed length, not the original one."""

    decode_from_cache_length: ClassVar[bool] = True

    def build_press(self, ratio: float) -> BasePress:
        return KeyRerotationPress(press=KnormPress(compression_ratio=ratio))
