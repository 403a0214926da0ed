"""The kvx side of the plugin: a compressor dataclass whose fields are ``press.<field>``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvx.compressors.kvpress_adapter import KVPressCompressor
from kvx.core.checks import check_int
from kvx_plugin_example.value_norm_press import ValueNormPress

if TYPE_CHECKING:
    from kvpress.presses.base_press import BasePress


@dataclass
class ValueNorm(KVPressCompressor):
    """Keep the largest-norm value vectors plus ``n_sink`` initial tokens (``press.n_sink=8``).

    A ScorerPress edits the cache only after attention, so the fast path (replay on a captured
    prefill) builds the hook path's cache exactly.
    """

    n_sink: int = 4

    def validate(self) -> None:
        check_int("press.n_sink", self.n_sink, 0)

    def build_press(self, ratio: float) -> BasePress:
        return ValueNormPress(compression_ratio=ratio, n_sink=self.n_sink)
