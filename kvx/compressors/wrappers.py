"""kvpress presses that wrap another press, over any base: ``press=adakv press/base=tova``.

Each wrapper's inner press is a slot (``kvx.compressors.base.slot``): a nested config group whose
option is any registered press, with its own fields (``-m press.base.window_size=32,64``) in the
cell's identity. Defaults follow kvpress's evaluation registry (``chunkkv`` is ChunkKV over SnapKV,
``block`` is Block over KeyDiff); kvpress's composed names (``adakv_snapkv``, ``critical_snapkv``,
``snap_think``...) are configs in ``conf/press/``. Wrappers whose base was fixed in an earlier kvx
(``legacy_base``) keep the identity their stored cells were hashed with when run over that base.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from kvx.compressors.base import registered_name, slot
from kvx.compressors.kvpress_adapter import KVPressCompressor
from kvx.core.checks import check_int, check_number
from kvx.core.errors import ConfigError
from kvx.core.registry import registry
from kvx.core.setting import RetainedMap, Setting, n_kept
from kvx.modeling.layers import attention_layers, compressed_flags, compressed_layers

if TYPE_CHECKING:
    import torch
    from kvpress.presses.base_press import BasePress
    from transformers import Cache, PreTrainedModel

    from kvx.modeling.capture import Capture


class Wrapper(KVPressCompressor):
    """A press over ``base``; subclasses are dataclasses with a ``base: Any = slot(...)`` field."""

    base: Any
    #: kvpress asserts its inner press is a ScorerPress (one score per token and head)
    needs_scorer: ClassVar[bool] = True
    #: the base this wrapper was fixed to before it took any: over it, the cell keeps its stored id
    legacy_base: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        """Built in Python (``AdaKV()``), a slot left empty holds its default option's press; composed
        by Hydra, the defaults list has filled it already."""
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if "slot" in f.metadata and getattr(self, f.name) is None:
                setattr(self, f.name, registry("compressor").get(f.metadata["slot"])())

    def validate(self) -> None:
        if self.needs_scorer and isinstance(self.base, KVPressCompressor) and not self.base.scorer:
            raise ConfigError(
                f"press.base: {type(self).__name__} wraps a ScorerPress (one score per token and head); "
                f"{type(self.base).__name__} is not one (e.g. press/base=snapkv, tova, knorm, keydiff)"
            )
        validate_slot(self, "base")

    @property
    def fast_path(self) -> bool:  # type: ignore[override]
        return bool(self.base.fast_path) and type(self).wrapper_fast_path

    #: whether the wrapper itself replays on a captured prefill (its base decides too)
    wrapper_fast_path: ClassVar[bool] = True

    @property
    def attn_implementation(self) -> str | None:  # type: ignore[override]
        return self.base.attn_implementation

    @property
    def mutates_keys(self) -> bool:  # type: ignore[override]
        return self.base.mutates_keys

    def press_fields(self) -> dict[str, Any]:
        """Recorded with each setting: the fields and the base as its name and fields."""
        return self.identity_fields()

    def stored_identity(self, name: str) -> dict[str, Any] | None:
        """Over its legacy base, the identity an earlier kvx hashed: the wrapper's and the base's
        fields side by side, no base named."""
        if self.legacy_base is None or registered_name(self.base) != self.legacy_base:
            return super().stored_identity(name)
        own = {k: v for k, v in self.identity_fields().items() if k != "base"}
        return {"name": name, "fields": {**own, **self.base.identity_fields()}}

    def press_setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        """Unsupported wherever the base is (SnapKV's window longer than the context)."""
        inner = self.base.press_setting(ratio, n_context, model)
        if not inner.supported:
            inner.method_parameter = self.press_fields()
            return inner
        kept = n_kept(n_context, ratio) if ratio > 0 else n_context
        return Setting(ratio, kept / n_context, {"kept_tokens_per_head": kept, **self.press_fields()})

    def retained_map(
        self, model: PreTrainedModel, cache: Cache, capture: Capture | None, ratio: float
    ) -> RetainedMap:
        """Head masks where the press masks keys (AdaKV-style), the press's own scores where it is a
        ScorerPress, else the kept rows matched back to positions (projected)."""
        from kvpress import ScorerPress

        press = getattr(self, "_last", (None, {}))[0]
        if any(getattr(m, "masked_key_indices", None) is not None for m in attention_layers(model)):
            return masked_map(model, cache)
        if isinstance(press, ScorerPress):
            return super().retained_map(model, cache, capture, ratio)
        return projected_map(model, cache, capture, type(self).__name__)


@dataclass
class AdaKV(Wrapper):
    """Head-wise budgets over a base press's scores; masks keys per head instead of shrinking the cache."""

    alpha_safeguard: float = 0.2
    base: Any = slot("snapkv")
    legacy_base: ClassVar[str | None] = "snapkv"

    def validate(self) -> None:
        super().validate()
        check_number("press.alpha_safeguard", self.alpha_safeguard, 0.0, 1.0)

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import AdaKVPress

        return AdaKVPress(press=self.base.build_press(ratio), alpha_safeguard=self.alpha_safeguard)

    def press_setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        setting = super().press_setting(ratio, n_context, model)
        if setting.supported:  # the mean over heads: each head keeps its own count
            setting.method_parameter["mean_kept_tokens_per_head"] = setting.method_parameter.pop(
                "kept_tokens_per_head"
            )
        return setting


@dataclass
class CriticalKV(Wrapper):
    """A base press's scores reweighted by the output projection of each value (two stages)."""

    epsilon: float = 1e-4
    first_stage_ratio: float = 0.5
    base: Any = slot("snapkv")

    def validate(self) -> None:
        super().validate()
        check_number("press.epsilon", self.epsilon, 0.0)
        check_number("press.first_stage_ratio", self.first_stage_ratio, 0.0, 1.0)

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import CriticalKVPress

        press = CriticalKVPress(
            press=self.base.build_press(ratio), epsilon=self.epsilon, first_stage_ratio=self.first_stage_ratio
        )
        press.compression_ratio = ratio
        return press


@dataclass
class CriticalAdaKV(Wrapper):
    """CriticalKV's reweighted scores with AdaKV's head-wise budgets."""

    alpha_safeguard: float = 0.2
    epsilon: float = 1e-4
    first_stage_ratio: float = 0.5
    base: Any = slot("snapkv")

    def validate(self) -> None:
        super().validate()
        check_number("press.alpha_safeguard", self.alpha_safeguard, 0.0, 1.0)
        check_number("press.epsilon", self.epsilon, 0.0)
        check_number("press.first_stage_ratio", self.first_stage_ratio, 0.0, 1.0)

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import CriticalAdaKVPress

        return CriticalAdaKVPress(
            press=self.base.build_press(ratio),
            alpha_safeguard=self.alpha_safeguard,
            epsilon=self.epsilon,
            first_stage_ratio=self.first_stage_ratio,
        )


@dataclass
class ChunkKV(Wrapper):
    """Whole chunks of ``chunk_length`` tokens, scored by the base press (kvpress's ``chunkkv``)."""

    chunk_length: int = 20
    base: Any = slot("snapkv")
    legacy_base: ClassVar[str | None] = "knorm"

    def budget_ratio(self, budget: int, n_context: int) -> float:
        """Whole chunks: the ratio that keeps ``budget // chunk_length`` chunks (at least one)."""
        n_chunks = -(-n_context // self.chunk_length)
        kept = max(1, budget // self.chunk_length)
        return 0.0 if kept >= n_chunks else 1.0 - (kept + 0.5) / n_chunks

    def validate(self) -> None:
        super().validate()
        check_int("press.chunk_length", self.chunk_length, 1)

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import ChunkKVPress

        return ChunkKVPress(press=self.base.build_press(ratio), chunk_length=self.chunk_length)

    def press_setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        inner = self.base.press_setting(ratio, n_context, model)
        complete, rest = divmod(n_context, self.chunk_length)
        if not inner.supported or complete == 0 or ratio == 0:
            return super().press_setting(ratio, n_context, model)
        n_chunks = complete + (rest > 0)
        kept_chunks = max(1, int(n_chunks * (1 - ratio)))
        # the partial last chunk is kept only when it scores among the top chunks: the exact
        # count is known after scoring; report the bound with full chunks
        kept = min(n_context, kept_chunks * self.chunk_length)
        params = {**self.press_fields(), "chunks_kept": kept_chunks, "kept_tokens_upper_bound": kept}
        return Setting(ratio, kept / n_context, params)


@dataclass
class EntropyGatedChunkKV(ChunkKV):
    """ChunkKV whose low-entropy chunks are cut finer (``low_entropy_chunk_length``)."""

    chunk_length: int = 10
    low_entropy_chunk_length: int = 4
    base: Any = slot("snapkv")
    legacy_base: ClassVar[str | None] = None

    def validate(self) -> None:
        super().validate()
        check_int("press.low_entropy_chunk_length", self.low_entropy_chunk_length, 1)
        if self.low_entropy_chunk_length >= self.chunk_length:
            raise ConfigError(
                f"press.low_entropy_chunk_length={self.low_entropy_chunk_length} must be below "
                f"press.chunk_length={self.chunk_length}"
            )

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import EntropyGatedChunkKVPress

        return EntropyGatedChunkKVPress(
            press=self.base.build_press(ratio),
            chunk_length=self.chunk_length,
            low_entropy_chunk_length=self.low_entropy_chunk_length,
        )

    def press_setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        return Wrapper.press_setting(self, ratio, n_context, model)  # chunk sizes vary: no chunk bound


@dataclass
class Chunk(Wrapper):
    """The base press applied to each ``chunk_length``-token chunk on its own (uniform coverage)."""

    chunk_length: int = 1024
    base: Any = slot("knorm")

    def validate(self) -> None:
        super().validate()
        check_int("press.chunk_length", self.chunk_length, 1)

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import ChunkPress

        return ChunkPress(press=self.base.build_press(ratio), chunk_length=self.chunk_length)


@dataclass
class Block(Wrapper):
    """The base press's scores, evicted block by block (kvpress's ``block_keydiff``)."""

    block_size: int = 128
    base: Any = slot("keydiff")
    legacy_base: ClassVar[str | None] = "knorm"

    def validate(self) -> None:
        super().validate()
        check_int("press.block_size", self.block_size, 1)

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import BlockPress

        return BlockPress(press=self.base.build_press(ratio), block_size=self.block_size)


@dataclass
class KeyRerotation(Wrapper):
    """The base press's eviction, then keys re-rotated to contiguous positions: decoding continues
    from the compressed length, not the original one."""

    base: Any = slot("knorm")
    legacy_base: ClassVar[str | None] = "knorm"
    decode_from_cache_length: ClassVar[bool] = True

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import KeyRerotationPress

        return KeyRerotationPress(press=self.base.build_press(ratio))


@dataclass
class Merging(Wrapper):
    """Merge-on-evict: each evicted value is merged into its most similar kept one (keys untouched)."""

    similarity_threshold: float = 0.0
    merge_fraction: float = 1.0
    base: Any = slot("knorm")

    def validate(self) -> None:
        super().validate()
        check_number("press.similarity_threshold", self.similarity_threshold, 0.0, 1.0)
        check_number("press.merge_fraction", self.merge_fraction, 0.0, 1.0)
        if self.merge_fraction == 0:
            raise ConfigError("press.merge_fraction=0 merges nothing: it must be in (0, 1]")

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import MergingPress

        return MergingPress(
            press=self.base.build_press(ratio),
            similarity_threshold=self.similarity_threshold,
            merge_fraction=self.merge_fraction,
        )


@dataclass
class PerLayerCompression(Wrapper):
    """The base press with one ratio per layer (``press.compression_ratios=[0.2,0.8,...]``): the list
    is the setting, so the run's ``ratio`` is not used and the cell shows the lists's mean."""

    compression_ratios: list[float] = dataclasses.field(default_factory=list)
    base: Any = slot("knorm")
    wrapper_fast_path: ClassVar[bool] = False  # kvpress applies it in its forward hook only
    budget_unsupported: ClassVar[str] = (
        "per-layer ratios fix what each layer keeps: a token budget does not apply"
    )

    def validate(self) -> None:
        super().validate()
        if not self.compression_ratios:
            raise ConfigError("press.compression_ratios is empty: give one ratio per layer, e.g. [0.25,0.5]")
        for i, ratio in enumerate(self.compression_ratios):
            check_number(f"press.compression_ratios[{i}]", ratio, 0.0, 1.0)

    def setting_spec(self, ratio: float, budget_tokens: int | None) -> Any:
        from kvx.core.identity import SettingSpec

        if budget_tokens is not None:
            return SettingSpec("budget_tokens", budget_tokens)
        if not self.compression_ratios:  # refused by validate(); a label still reads
            return SettingSpec("none", None)
        return SettingSpec("ratio", round(sum(self.compression_ratios) / len(self.compression_ratios), 6))

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import PerLayerCompressionPress

        return PerLayerCompressionPress(
            press=self.base.build_press(0.0), compression_ratios=list(self.compression_ratios)
        )

    def press_setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        n_layers = len(attention_layers(model))
        if len(self.compression_ratios) != n_layers:
            given = len(self.compression_ratios)
            reason = f"press.compression_ratios has {given} ratios; the reader has {n_layers} layers"
            return Setting(ratio, None, self.press_fields(), False, reason)
        inner = self.base.press_setting(max(self.compression_ratios), n_context, model)
        if not inner.supported:
            inner.method_parameter = self.press_fields()
            return inner
        kept = [n_kept(n_context, r) if r > 0 else n_context for r in self.compression_ratios]
        params = {"kept_tokens_per_layer": kept, **self.press_fields()}
        return Setting(ratio, sum(kept) / (len(kept) * n_context), params)

    def retained_map(
        self, model: PreTrainedModel, cache: Cache, capture: Capture | None, ratio: float
    ) -> RetainedMap:
        return projected_map(model, cache, capture, "PerLayerCompression")


@dataclass
class DMS(Wrapper):
    """Dynamic Memory Sparsification (dense prefill): tokens whose base score falls below ``threshold``
    leave the cache once they are out of the ``sliding_window_size`` most recent ones. The threshold,
    not the ratio, sets what is kept, so the cell's setting is the threshold; with ``decoding=true``
    it also evicts while the answer is generated."""

    threshold: float | None = None
    sliding_window_size: int = 128
    decoding: bool = False
    base: Any = slot("knorm")
    budget_unsupported: ClassVar[str] = (
        "DMS keeps what scores above its threshold: a token budget does not apply"
    )
    ratio_unused: ClassVar[bool] = True  # its threshold decides
    wrapper_fast_path: ClassVar[bool] = False

    def validate(self) -> None:
        super().validate()
        if self.threshold is None:
            raise ConfigError(
                "press.threshold is not set: DMS evicts tokens scoring below it (e.g. press.threshold=0.5)"
            )
        check_number("press.threshold", self.threshold, float("-inf"))
        check_int("press.sliding_window_size", self.sliding_window_size, 0)

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import DMSPress

        return DMSPress(
            press=self.base.build_press(0.0),
            threshold=self.threshold,
            sliding_window_size=self.sliding_window_size,
            decoding=self.decoding,
        )

    @property
    def compresses_decoding(self) -> bool:  # type: ignore[override]
        return self.decoding

    def decode_under(self, model: PreTrainedModel) -> contextlib.AbstractContextManager[None]:
        """With ``decoding=true`` the decode runs under the press the prefill used (its score buffer)."""
        return self._last[0](model) if self.decoding else contextlib.nullcontext()

    def press_setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        # what it keeps depends on the scores: measured after the prefill (the cache's bytes)
        return Setting(
            0.0, None, {"phases": "prefill+decode" if self.decoding else "prefill", **self.press_fields()}
        )


def validate_slot(wrapper: KVPressCompressor, name: str) -> KVPressCompressor:
    """The kvpress press in ``wrapper``'s slot ``name``, its fields checked; an error names the field
    where the user set it (``press.base.window_size``, not ``press.window_size``)."""
    inner = getattr(wrapper, name)
    if not isinstance(inner, KVPressCompressor):
        raise ConfigError(f"press.{name}: {type(inner).__name__} is not a kvpress press")
    try:
        inner.validate()
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("press.", f"press.{name}.", 1)) from None
    return inner


def masked_map(model: PreTrainedModel, cache: Cache) -> RetainedMap:
    """Measured per head: every position except the ones the press masked in that head."""
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


def projected_map(model: PreTrainedModel, cache: Cache, capture: Capture | None, name: str) -> RetainedMap:
    """Projected: each head's kept key rows matched back to their original positions (the press keeps
    whole rows; keys are not changed, values may be)."""
    import torch

    if capture is None:
        return RetainedMap("not_applicable", reason=f"{name}'s map needs the captured prefill")
    rows, order = [], []
    layers = set(compressed_layers(model))
    for idx, layer in enumerate(capture.layers):
        heads, n = layer.keys.shape[1], layer.keys.shape[2]
        if idx not in layers:
            rows.extend([torch.ones(n, dtype=torch.bool)] * heads)
            order.append(torch.arange(n).expand(heads, -1))
            continue
        kept = []
        for head in range(heads):
            positions = match_rows(cache.layers[idx].keys[0, head], layer.keys[0, head])
            if positions is None:
                return RetainedMap(
                    "not_applicable", reason=f"kept keys of layer {idx} do not match unique rows"
                )
            row = torch.zeros(n, dtype=torch.bool)
            row[positions] = True
            rows.append(row)
            kept.append(torch.tensor(positions))
        order.append(torch.stack(kept))
    return RetainedMap("projected", torch.stack(rows), rows=order, compressed=compressed_flags(model))


def match_rows(kept: torch.Tensor, full: torch.Tensor) -> list[int] | None:
    """Original row index of each kept row (exact equality), or None if any is missing/ambiguous.

    One sort of the rows (``torch.unique``) instead of comparing every kept row with every row: at 1k
    tokens that is a few milliseconds a head, where the pairwise comparison took seconds a cache."""
    import torch

    _, ids = torch.unique(torch.cat([full, kept]), dim=0, return_inverse=True)
    full_ids, kept_ids = ids[: len(full)], ids[len(full) :]
    counts = torch.bincount(full_ids, minlength=int(ids.max()) + 1)
    if bool((counts[kept_ids] != 1).any()):  # a kept row not in ``full``, or in it twice
        return None
    position = torch.empty_like(counts)
    position[full_ids] = torch.arange(len(full))
    return position[kept_ids].tolist()


@dataclass
class Composed(Wrapper):
    """Two presses in sequence, the second on what the first kept (kvpress's ComposedPress; its
    ``snap_think`` is SnapKV then ThinK). ``first`` runs at the cell's ratio, ``second`` at
    ``second_ratio`` (null: the cell's ratio too); nest a ``composed`` as ``second`` for a longer stack."""

    second_ratio: float | None = None
    first: Any = slot("snapkv")
    second: Any = slot("think")
    needs_scorer: ClassVar[bool] = False
    wrapper_fast_path: ClassVar[bool] = False
    budget_unsupported: ClassVar[str] = "two stages share the ratio: a token budget does not apply"

    @property
    def base(self) -> Any:  # type: ignore[override]
        """The first stage decides the attention implementation and what keys it mutates."""
        return self.first

    @property
    def mutates_keys(self) -> bool:  # type: ignore[override]
        return bool(self.first.mutates_keys or self.second.mutates_keys)

    def validate(self) -> None:
        for name in ("first", "second"):
            stage = validate_slot(self, name)
            if isinstance(stage, (AdaKV, CriticalAdaKV)) or type(stage).__name__ in ("kvzip", "kvgrad"):
                raise ConfigError(f"press.{name}: kvpress's ComposedPress cannot hold {type(stage).__name__}")
        if self.second_ratio is not None:
            check_number("press.second_ratio", self.second_ratio, 0.0, 1.0)

    def stored_identity(self, name: str) -> dict[str, Any] | None:
        return None

    def _second(self, ratio: float) -> float:
        return ratio if self.second_ratio is None else self.second_ratio

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import ComposedPress

        return ComposedPress([self.first.build_press(ratio), self.second.build_press(self._second(ratio))])

    def press_setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        first = self.first.press_setting(ratio, n_context, model)
        if not first.supported:
            return Setting(ratio, None, self.press_fields(), False, f"press.first: {first.reason}")
        kept = first.method_parameter.get("kept_tokens_per_head", n_context)
        second = self.second.press_setting(self._second(ratio), kept, model)
        if not second.supported:
            return Setting(ratio, None, self.press_fields(), False, f"press.second: {second.reason}")
        shares = [s.retained_share for s in (first, second)]
        share = None if None in shares else shares[0] * shares[1]  # type: ignore[operator]
        return Setting(
            ratio, share, {**self.press_fields(), "stages": [first.method_parameter, second.method_parameter]}
        )

    def retained_map(
        self, model: PreTrainedModel, cache: Cache, capture: Capture | None, ratio: float
    ) -> RetainedMap:
        if self.second.mutates_keys or self.first.mutates_keys:
            return RetainedMap(
                "not_applicable", reason="a stage changes the keys: kept rows cannot be matched"
            )
        return projected_map(model, cache, capture, "Composed")
