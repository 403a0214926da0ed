"""Every other offline-capable kvpress press, by name, with the press's own defaults.

Each entry is a small dataclass whose fields copy the press's plain-valued fields and defaults
(kvpress 0.5.5; ``tests/compressors/test_catalog.py`` fails when kvpress drifts), so ``press=knorm`` and
``press=expected_attention press.n_sink=8`` work like the presets. kvpress is imported only when a
press is built: registering these config nodes must not cost its ten-second import. Presses that
fetch hub artefacts (DuoAttention, Q-Filters, KVzap, ...) are not listed: they cannot run offline
and would only fail later.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from kvx.compressors.kvpress_adapter import KVPressCompressor
from kvx.core.checks import check_choice, check_int, check_number

if TYPE_CHECKING:
    from kvpress.presses.base_press import BasePress

CUR_LEVERAGE = ("key", "value", "kv_avg", "kv_product")


class ScorerPressCompressor(KVPressCompressor):
    """The kvpress ScorerPress named ``press_class``, built from ``compression_ratio`` and every field
    (kept per head = max(1, int(n * (1 - ratio))))."""

    press_class: ClassVar[str]

    def build_press(self, ratio: float) -> BasePress:
        import kvpress

        return getattr(kvpress, self.press_class)(compression_ratio=ratio, **self.press_fields())


@dataclass
class knorm(ScorerPressCompressor):  # noqa: N801 - registered names are the kvx names
    press_class: ClassVar[str] = "KnormPress"
    ratio_free_scores: ClassVar[bool] = True


@dataclass
class random(ScorerPressCompressor):  # noqa: N801
    """kvx seeds it (kvpress's default is None): a run must be reproducible."""

    seed: int | None = 0
    press_class: ClassVar[str] = "RandomPress"
    # draws from torch's RNG: a captured replay would draw differently from the hook
    fast_path: ClassVar[bool] = False

    def validate(self) -> None:
        if self.seed is not None:
            check_int("press.seed", self.seed)


@dataclass
class expected_attention(ScorerPressCompressor):  # noqa: N801
    n_future_positions: int = 512
    n_sink: int = 4
    use_covariance: bool = True
    use_vnorm: bool = True
    epsilon: float = 0.0
    press_class: ClassVar[str] = "ExpectedAttentionPress"

    def validate(self) -> None:
        check_int("press.n_future_positions", self.n_future_positions, 1)
        check_int("press.n_sink", self.n_sink, 0)
        check_number("press.epsilon", self.epsilon, 0.0)


@dataclass
class observed_attention(ScorerPressCompressor):  # noqa: N801
    press_class: ClassVar[str] = "ObservedAttentionPress"
    # needs the attention weights, which only the eager implementation returns
    fast_path: ClassVar[bool] = False
    attn_implementation: ClassVar[str | None] = "eager"


@dataclass
class lagkv(ScorerPressCompressor):  # noqa: N801
    n_sink: int = 4
    lag_size: int = 128
    cross_scoring: bool = False
    press_class: ClassVar[str] = "LagKVPress"

    def validate(self) -> None:
        check_int("press.n_sink", self.n_sink, 0)
        check_int("press.lag_size", self.lag_size, 1)


@dataclass
class cur(ScorerPressCompressor):  # noqa: N801
    num_sinks: int = 4
    leverage_type: str = "kv_product"
    use_random_leverage: bool = False
    use_local_approximation: bool = True
    local_window_size: int = 16
    press_class: ClassVar[str] = "CURPress"

    def validate(self) -> None:
        check_int("press.num_sinks", self.num_sinks, 0)
        check_choice("press.leverage_type", self.leverage_type, CUR_LEVERAGE)
        check_int("press.local_window_size", self.local_window_size, 1)


@dataclass
class leverage(ScorerPressCompressor):  # noqa: N801
    sketch_dimension: int = 48
    press_class: ClassVar[str] = "LeverageScorePress"
    # random sketches: a replay on captured inputs draws a different sketch than the hook did
    fast_path: ClassVar[bool] = False

    def validate(self) -> None:
        check_int("press.sketch_dimension", self.sketch_dimension, 1)


@dataclass
class compactor(ScorerPressCompressor):  # noqa: N801
    sink_size_start: int = 8
    sink_size_end: int = 4
    chunk_size: int = 256
    sketch_dimension: int = 48
    blending: float | None = None
    press_class: ClassVar[str] = "CompactorPress"
    fast_path: ClassVar[bool] = False  # random sketches, like leverage

    def validate(self) -> None:
        check_int("press.sink_size_start", self.sink_size_start, 0)
        check_int("press.sink_size_end", self.sink_size_end, 0)
        check_int("press.chunk_size", self.chunk_size, 1)
        check_int("press.sketch_dimension", self.sketch_dimension, 1)
        if self.blending is not None:
            check_number("press.blending", self.blending, 0.0, 1.0)


@dataclass
class non_causal_attention(ScorerPressCompressor):  # noqa: N801
    chunk_size: int = 256
    press_class: ClassVar[str] = "NonCausalAttnPress"

    def validate(self) -> None:
        check_int("press.chunk_size", self.chunk_size, 1)


@dataclass
class block(KVPressCompressor):  # noqa: N801 - registered names are the kvx names
    """Block-wise K-norm scoring (BlockPress over KnormPress)."""

    block_size: int = 128

    def validate(self) -> None:
        check_int("press.block_size", self.block_size, 1)

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import BlockPress, KnormPress

        return BlockPress(press=KnormPress(compression_ratio=ratio), block_size=self.block_size)


@dataclass
class key_rerotation(KVPressCompressor):  # noqa: N801
    """K-norm eviction, then keys re-rotated to contiguous positions: decoding continues from
    the compressed length, not the original one."""

    decode_from_cache_length: ClassVar[bool] = True

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import KeyRerotationPress, KnormPress

        return KeyRerotationPress(press=KnormPress(compression_ratio=ratio))
