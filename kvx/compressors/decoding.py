"""kvpress presses that compress while the answer is generated: the decode runs under the press.

``decoding`` (DecodingPress), ``compression_ratio_decoding``, ``cam`` (CaM) and ``prefill_decoding``
(a prefill press, then DecodingPress) wrap any ScorerPress or AdaKV (``press/base=knorm``, kvpress's
``decoding_knorm``). Their cache changes while it decodes, so each decodes alone (never in a batch),
its record says which phases compressed (``phases``), and the decode measures the cache's bytes after
every step (``kv_bytes_decode_*`` in the record's cost). Diagnostics that need the cache as compression
left it are not applicable: no such cache exists once decoding has compressed it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from kvx.compressors.base import slot
from kvx.compressors.kvpress_adapter import KVPressCompressor
from kvx.compressors.wrappers import AdaKV, Wrapper, validate_slot
from kvx.core.checks import check_int
from kvx.core.errors import ConfigError
from kvx.core.setting import RetainedMap, Setting

if TYPE_CHECKING:
    from kvpress.presses.base_press import BasePress
    from transformers import Cache, PreTrainedModel

    from kvx.modeling.capture import Capture


class DecodingCompressor(Wrapper):
    """A press over ``base`` that runs while decoding; its prefill keeps the whole context."""

    compresses_decoding: ClassVar[bool] = True
    needs_scorer: ClassVar[bool] = False
    ratio_unused: ClassVar[bool] = True  # target_size sets what decoding keeps
    budget_unsupported: ClassVar[str] = (
        "decoding-time compression keeps its target size: a token budget does not apply"
    )

    def validate(self) -> None:
        base = self.base
        if not isinstance(base, KVPressCompressor) or not (base.scorer or isinstance(base, AdaKV)):
            raise ConfigError(
                f"press.base: kvpress's {type(self).__name__} wraps a ScorerPress or AdaKV; "
                f"{type(base).__name__} is neither (e.g. press/base=knorm, tova, streaming_llm)"
            )
        super().validate()
        check_int("press.compression_interval", self.compression_interval, 1)
        check_int("press.hidden_states_buffer_size", self.hidden_states_buffer_size, 0)

    @property
    def fast_path(self) -> bool:  # type: ignore[override]
        return True  # the prefill is the uncompressed capture

    def press_setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        return Setting(0.0, None, {"phases": "decode", **self.press_fields()})

    def inner_press(self) -> BasePress:
        return self.base.build_press(0.0)  # the decoding press sets its base's ratio at each step

    def prefill(self, model: PreTrainedModel, context_ids: Any, ratio: float) -> Cache:
        from transformers import DynamicCache

        self._press(ratio)
        cache = DynamicCache()
        model.model(input_ids=context_ids, past_key_values=cache)
        return cache

    def compress_captured(self, model: PreTrainedModel, capture: Capture, ratio: float) -> Cache:
        self._press(ratio)
        return capture.full_cache()

    @contextlib.contextmanager
    def decode_under(self, model: PreTrainedModel) -> Iterator[None]:
        """The decode runs under the press this cell's prefill built (its state carried over)."""
        press = self._last[0]
        with press(model):
            yield

    def retained_map(
        self, model: PreTrainedModel, cache: Cache, capture: Capture | None, ratio: float
    ) -> RetainedMap:
        return RetainedMap(
            "not_applicable", reason="decoding-time compression: the cache changes as it decodes"
        )


@dataclass
class Decoding(DecodingCompressor):
    """Every ``compression_interval`` decoding steps the cache is cut back to ``target_size``
    tokens by the base press's scores (kvpress's ``decoding_<base>``)."""

    compression_interval: int = 512
    target_size: int = 2048
    hidden_states_buffer_size: int = 256
    base: Any = slot("knorm")

    def validate(self) -> None:
        super().validate()
        check_int("press.target_size", self.target_size, 1)

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import DecodingPress

        return DecodingPress(
            base_press=self.inner_press(),
            compression_interval=self.compression_interval,
            target_size=self.target_size,
            hidden_states_buffer_size=self.hidden_states_buffer_size,
        )


@dataclass
class CompressionRatioDecoding(DecodingCompressor):
    """Decoding compression to a ratio of everything seen so far: the run's ``ratio`` is kvpress's
    ``target_compression_ratio`` (a swept axis like any press's ratio)."""

    compression_interval: int = 512
    hidden_states_buffer_size: int = 256
    base: Any = slot("knorm")
    ratio_unused: ClassVar[bool] = False  # the ratio is its target_compression_ratio

    def press_setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        return Setting(ratio, None, {"phases": "decode", **self.press_fields()})

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import CompressionRatioDecodingPress

        return CompressionRatioDecodingPress(
            base_press=self.inner_press(),
            compression_interval=self.compression_interval,
            hidden_states_buffer_size=self.hidden_states_buffer_size,
            target_compression_ratio=ratio,
        )


@dataclass
class CAM(DecodingCompressor):
    """Cache Merging: evicted values are merged into their ``merge_budget`` kept neighbours before
    the decoding cache is cut to ``target_size`` (kvpress's ``cam_<base>``)."""

    compression_interval: int = 512
    target_size: int = 2048
    hidden_states_buffer_size: int = 256
    merge_budget: int = 32
    base: Any = slot("knorm")

    def validate(self) -> None:
        super().validate()
        check_int("press.target_size", self.target_size, 1)
        check_int("press.merge_budget", self.merge_budget, 1)

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import CAMPress

        return CAMPress(
            base_press=self.inner_press(),
            compression_interval=self.compression_interval,
            target_size=self.target_size,
            hidden_states_buffer_size=self.hidden_states_buffer_size,
            merge_budget=self.merge_budget,
        )


@dataclass
class PrefillDecoding(DecodingCompressor):
    """Two phases: the ``prefill`` press compresses the context at the run's ratio, then DecodingPress
    over ``base`` keeps the decoding cache at ``target_size`` (kvpress's PrefillDecodingPress)."""

    compression_interval: int = 512
    target_size: int = 2048
    hidden_states_buffer_size: int = 256
    base: Any = slot("knorm")
    prefilling: Any = slot("snapkv")
    ratio_unused: ClassVar[bool] = False  # the ratio is the prefill press's
    budget_unsupported: ClassVar[str] = ""  # a budget is the prefill press's

    def validate(self) -> None:
        super().validate()
        check_int("press.target_size", self.target_size, 1)
        validate_slot(self, "prefilling")

    @property
    def fast_path(self) -> bool:  # type: ignore[override]
        return bool(self.prefilling.fast_path)

    @property
    def attn_implementation(self) -> str | None:  # type: ignore[override]
        return self.prefilling.attn_implementation

    def press_setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        setting = self.prefilling.press_setting(ratio, n_context, model)
        prefilled = setting.method_parameter
        setting.method_parameter = {"phases": "prefill+decode", **self.press_fields(), "prefill": prefilled}
        return setting

    def build_press(self, ratio: float) -> BasePress:
        from kvpress import DecodingPress, PrefillDecodingPress

        decoding = DecodingPress(
            base_press=self.inner_press(),
            compression_interval=self.compression_interval,
            target_size=self.target_size,
            hidden_states_buffer_size=self.hidden_states_buffer_size,
        )
        return PrefillDecodingPress(
            prefilling_press=self.prefilling.build_press(ratio), decoding_press=decoding
        )

    def prefill(self, model: PreTrainedModel, context_ids: Any, ratio: float) -> Cache:
        return KVPressCompressor.prefill(self, model, context_ids, ratio)

    def compress_captured(self, model: PreTrainedModel, capture: Capture, ratio: float) -> Cache:
        return KVPressCompressor.compress_captured(self, model, capture, ratio)

    @contextlib.contextmanager
    def decode_under(self, model: PreTrainedModel) -> Iterator[None]:
        """Only the decoding press: kvpress's PrefillDecodingPress runs it on every forward after the
        prefill, and the prefill is done."""
        with self._last[0].decoding_press(model):
            yield
