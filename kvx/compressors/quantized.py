"""Any press prefilling into a quantized cache: ``press=quantized press/base=snapkv press.nbits=4``.

kvpress runs a press beside ``cache=QuantizedCache(...)``: the prefill quantizes each layer's keys and
values, the press scores the dequantized ones, and what it keeps is quantized again. One cell is the
press at the run's ratio on a cache of ``nbits``; its record's ``kv_bytes`` are the quantized codes,
scales and zeros the cache holds (``kvx.modeling.costs``).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from kvx.compressors.base import slot
from kvx.compressors.hqq import BITS, shape_reason
from kvx.compressors.wrappers import Wrapper
from kvx.core.checks import check_choice, check_int
from kvx.core.errors import ConfigError
from kvx.core.setting import RetainedMap, Setting
from kvx.modeling.layers import compressed_layers

if TYPE_CHECKING:
    from kvpress.presses.base_press import BasePress
    from transformers import Cache, PreTrainedModel, QuantizedCache

    from kvx.modeling.capture import Capture

BACKENDS = ("hqq", "quanto")
#: what each backend needs installed
BACKEND_MODULES = {"hqq": "hqq", "quanto": "optimum.quanto"}


@dataclass
class Quantized(Wrapper):
    """The base press at the run's ratio, its cache quantized to ``nbits`` by ``backend``."""

    backend: str = "hqq"
    nbits: int = 4
    group_size: int = 64
    residual_length: int = 128
    axis_key: int = 0
    axis_value: int = 0
    base: Any = slot("snapkv")
    needs_scorer: ClassVar[bool] = False

    def validate(self) -> None:
        super().validate()
        check_choice("press.backend", self.backend, BACKENDS)
        check_choice("press.nbits", self.nbits, BITS if self.backend == "hqq" else (2, 4))
        check_int("press.group_size", self.group_size, 1)
        check_int("press.residual_length", self.residual_length, 0)
        check_choice("press.axis_key", self.axis_key, (0, 1))
        check_choice("press.axis_value", self.axis_value, (0, 1))
        module = BACKEND_MODULES[self.backend]
        if importlib.util.find_spec(module.partition(".")[0]) is None:
            extra = "pip install 'kvx[hqq]'" if self.backend == "hqq" else "pip install optimum-quanto"
            raise ConfigError(f"press.backend={self.backend} needs the {module} package: {extra}")

    def build_press(self, ratio: float) -> BasePress:
        return self.base.build_press(ratio)

    def press_setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        """The base's setting, its share of a 16-bit cache scaled by ``nbits / 16``."""
        setting = self.base.press_setting(ratio, n_context, model)
        params = {**self.press_fields(), "base_setting": setting.method_parameter}
        if not setting.supported:
            return Setting(ratio, None, params, False, setting.reason)
        reason = shape_reason(model, self.nbits, self.group_size, {self.axis_key, self.axis_value})
        if self.backend == "hqq" and reason:
            return Setting(ratio, None, params, False, reason)
        share = None if setting.retained_share is None else setting.retained_share * self.nbits / 16
        return Setting(ratio, share, params)

    def new_cache(self, model: PreTrainedModel) -> QuantizedCache:
        """kvpress's way: the press's hook runs on a prefill into this quantized cache."""
        from transformers import QuantizedCache

        return QuantizedCache(
            backend=self.backend,
            config=model.config,
            nbits=self.nbits,
            axis_key=self.axis_key,
            axis_value=self.axis_value,
            q_group_size=self.group_size,
            residual_length=self.residual_length,
        )

    def compress_captured(self, model: PreTrainedModel, capture: Capture, ratio: float) -> Cache:
        """The same cache from the capture: each layer quantized as the prefill would, the base press
        run on the dequantized keys and values (what kvpress's hook reads), what it keeps requantized."""
        cache = self.new_cache(model)
        seen = []
        for idx, layer in enumerate(capture.layers):
            cache.update(layer.keys, layer.values, idx)
            quantized = cache.layers[idx]
            keys = quantized._dequantize(quantized._quantized_keys)
            values = quantized._dequantize(quantized._quantized_values)
            seen.append(dataclasses.replace(layer, keys=keys, values=values))
        kept = self.base.compress_captured(model, dataclasses.replace(capture, layers=seen, scores={}), ratio)
        object.__setattr__(self, "_last", getattr(self.base, "_last", (None, {})))
        for idx in compressed_layers(model):
            keys, values = kept.layers[idx].keys, kept.layers[idx].values
            layer = cache.layers[idx]
            layer._quantized_keys = layer._quantize(keys.contiguous(), axis=layer.axis_key)
            layer._quantized_values = layer._quantize(values.contiguous(), axis=layer.axis_value)
            layer.keys = keys.new_zeros(0)
            layer.values = values.new_zeros(0)
            layer.cumulative_length = keys.shape[2]
        return cache

    def retained_map(
        self, model: PreTrainedModel, cache: Cache, capture: Capture | None, ratio: float
    ) -> RetainedMap:
        return RetainedMap(
            "not_applicable", reason="the kept rows are quantized: they cannot be matched to positions"
        )
