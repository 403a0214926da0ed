"""kvpress's presses that need no other press, by name, with the press's own defaults.

Each entry is a small dataclass whose fields copy the press's plain-valued fields and defaults
(kvpress 0.5.5; ``tests/compressors/test_catalog.py`` fails when kvpress drifts), so ``press=knorm`` and
``press=expected_attention_plain press.n_sink=8`` work like the presets. kvpress is imported only when a
press is built: registering these config nodes must not cost its ten-second import. Presses that wrap
another are in ``wrappers``, ``decoding`` and ``quantized``; the test lists the presses that fetch hub
artefacts (DuoAttention, Q-Filters, KVzap, ...), which cannot run offline, and why each is left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from kvx.compressors.kvpress_adapter import KVPressCompressor
from kvx.core.checks import check_choice, check_int, check_number
from kvx.core.setting import Setting

if TYPE_CHECKING:
    from kvpress.presses.base_press import BasePress
    from transformers import PreTrainedModel

CUR_LEVERAGE = ("key", "value", "kv_avg", "kv_product")
KVCOMPOSE_AGGREGATES = ("mean", "max")


class NamedPress(KVPressCompressor):
    """The kvpress press named ``press_class``, built from ``compression_ratio`` and every field."""

    press_class: ClassVar[str]

    def build_press(self, ratio: float) -> BasePress:
        import kvpress

        return getattr(kvpress, self.press_class)(compression_ratio=ratio, **self.press_fields())


class ScorerPressCompressor(NamedPress):
    """A kvpress ScorerPress (kept per head = max(1, int(n * (1 - ratio)))): any wrapper's base."""

    scorer: ClassVar[bool] = True


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
class expected_attention_plain(ScorerPressCompressor):  # noqa: N801
    """ExpectedAttentionPress alone. kvpress's registry names ``expected_attention`` the press under
    AdaKV with epsilon=1e-2 (``conf/press/expected_attention.yaml``); kvx before 0.2 named this one so,
    and its stored cells keep their ids."""

    n_future_positions: int = 512
    n_sink: int = 4
    use_covariance: bool = True
    use_vnorm: bool = True
    epsilon: float = 0.0
    press_class: ClassVar[str] = "ExpectedAttentionPress"
    legacy_name: ClassVar[str | None] = "expected_attention"

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
class cap(ScorerPressCompressor):  # noqa: N801
    """CAP: expected attention with a temperature ``tau`` on the future-query distribution."""

    tau: float = 5.0
    n_future_positions: int = 512
    n_sink: int = 4
    epsilon: float = 1e-6
    press_class: ClassVar[str] = "CapPress"

    def validate(self) -> None:
        check_number("press.tau", self.tau, 0.0)
        check_int("press.n_future_positions", self.n_future_positions, 1)
        check_int("press.n_sink", self.n_sink, 0)
        check_number("press.epsilon", self.epsilon, 0.0)


@dataclass
class kvcompose(NamedPress):  # noqa: N801
    """KVCompose: attention-guided composite tokens, structured (one budget per layer, aligned
    across heads) or not (``structured=false``: kvpress's ``kvcompose_unstructured``). It prefills
    through its own forward (a ~2x cache while it scores): no replay on a captured prefill."""

    structured: bool = True
    agg_task: str = "max"
    agg_group: str = "mean"
    agg_head: str = "mean"
    add_v_norm: bool = False
    add_mean_across_heads: bool = True
    keep_token_lower_bound: int = 0
    press_class: ClassVar[str] = "KVComposePress"
    fast_path: ClassVar[bool] = False

    def validate(self) -> None:
        for name in ("agg_task", "agg_group", "agg_head"):
            check_choice(f"press.{name}", getattr(self, name), KVCOMPOSE_AGGREGATES)
        check_int("press.keep_token_lower_bound", self.keep_token_lower_bound, 0)


@dataclass
class simlayerkv(KVPressCompressor):  # noqa: N801
    """SimLayerKV: "lazy" layers (the last queries attend mostly to the first and recent tokens) keep
    only those; the others keep everything. The threshold, not a ratio, decides, so the cell's
    setting is its fields; the share kept is known only after the prefill (the cache's bytes)."""

    lazy_threshold: float = 1.0
    n_last: int = 1
    n_recent: int = 1024
    n_initial: int = 4
    fast_path: ClassVar[bool] = False
    ratio_unused: ClassVar[bool] = True
    budget_unsupported: ClassVar[str] = (
        "SimLayerKV keeps whole layers or their ends: a token budget does not apply"
    )

    def validate(self) -> None:
        check_number("press.lazy_threshold", self.lazy_threshold, 0.0, 1.0)
        check_int("press.n_last", self.n_last, 1)
        check_int("press.n_recent", self.n_recent, 0)
        check_int("press.n_initial", self.n_initial, 0)

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import SimLayerKVPress

        return SimLayerKVPress(**self.press_fields())

    def press_setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        return Setting(0.0, None, self.press_fields())


class ReconstructionPress(NamedPress):
    """KVzip's family: after the prefill, the context is fed again as a reconstruction prompt built
    with the reader's chat template, which kvpress loads as ``AutoTokenizer.from_pretrained`` of the
    model's ``name_or_path``: a reader without such a folder records the cell unsupported."""

    fast_path: ClassVar[bool] = False

    def press_setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        from pathlib import Path

        source = str(getattr(model.config, "name_or_path", "") or "")
        if not source or not Path(source).is_dir():
            reason = (
                f"{self.press_class} loads the reader's tokenizer from model.config.name_or_path "
                f"({source or 'empty'}), which is not a local folder"
            )
            return Setting(ratio, None, self.press_fields(), False, reason)
        if type(model).__name__.startswith("Gemma3"):
            return Setting(ratio, None, self.press_fields(), False, f"{self.press_class} does not run Gemma3")
        return super().press_setting(ratio, n_context, model)


@dataclass
class kvzip(ReconstructionPress):  # noqa: N801
    """KVzip: scores from how much each cached pair serves reconstructing the context
    (``kvzip_plus_normalization=true``: kvpress's ``kvzip_plus``)."""

    layerwise: bool = False
    n_sink: int = 4
    kvzip_plus_normalization: bool = False
    chunk_size: int = 2048
    press_class: ClassVar[str] = "KVzipPress"

    def validate(self) -> None:
        check_int("press.n_sink", self.n_sink, 0)
        check_int("press.chunk_size", self.chunk_size, 1)


@dataclass
class kvgrad(ReconstructionPress):  # noqa: N801
    """KVgrad: KVzip's reconstruction scored by gradients of its loss with respect to the cache."""

    layerwise: bool = False
    n_sink: int = 4
    chunk_size: int = 512
    press_class: ClassVar[str] = "KVgradPress"

    def validate(self) -> None:
        check_int("press.n_sink", self.n_sink, 0)
        check_int("press.chunk_size", self.chunk_size, 1)
