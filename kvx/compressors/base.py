"""Compressor interface.

A compressor is a small dataclass (its fields are the Hydra node ``press.<field>``) that turns a
context into a cache. Two ways exist:

* ``prefill`` (the hook path) runs the context through the model with the compression active;
  every compressor supports it.
* ``compress_captured`` (the fast path) builds the same cache from one captured full prefill:
  kvpress presses edit the cache only after each layer's attention has run, so the hidden
  states of a compressed prefill are those of the full prefill. Compressors that set
  ``fast_path = True`` must produce exactly the hook path's cache (tests check this).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from kvx.checks import check_ratio as check_ratio  # re-exported: plugins import it from here
from kvx.identity import SettingSpec

if TYPE_CHECKING:
    import torch
    from transformers import Cache, PreTrainedModel

    from kvx.capture import Capture


@dataclass
class Setting:
    """What one (compressor, ratio) pair means on one context: stored with every record."""

    ratio: float
    retained_share: float | None
    method_parameter: dict[str, Any] = field(default_factory=dict)
    supported: bool = True
    reason: str = ""
    #: how the setting was asked for (``SettingSpec``): ``ratio`` is what the method ran with
    kind: str = "ratio"
    value: float | int | None = None


@dataclass
class RetainedMap:
    """Which original positions each layer-KV-head slot still represents after compression.

    ``mask`` is (n_layers * n_kv_heads, n_positions), slot-major (layer, then head). Status
    follows KVDiagnosis section 3.4: ``measured`` (direct map), ``projected`` (chunk -> tokens),
    ``structural`` (positions addressable, representation changed: no mask) or ``not_applicable``.
    """

    status: str
    mask: torch.Tensor | None = None
    reason: str = ""
    #: per layer, (kv_heads, cache rows): the original position each cache row holds;
    #: None means rows are positions (nothing was evicted, or positions were kept in place)
    rows: list[torch.Tensor] | None = None
    #: per layer, whether compression touched it; None means every layer. A layer left whole
    #: (sliding-window layers) holds every position, so its slots stay True in ``mask``.
    compressed: list[bool] | None = None

    def compressed_slots(self) -> torch.Tensor:
        """The rows of ``mask`` that belong to layers compression touched (all rows by default)."""
        if self.compressed is None:
            return self.mask
        import torch

        heads = self.mask.shape[0] // len(self.compressed)
        return self.mask[torch.tensor(self.compressed).repeat_interleave(heads)]

    def cache_rows(self, lengths: list[int], heads: int) -> list[torch.Tensor]:
        """Per layer, (heads, rows) original position of each of the first ``lengths[l]`` cache rows."""
        import torch

        return self.rows or [torch.arange(length).expand(heads, -1) for length in lengths]


class Compressor(ABC):
    """Base class for ``kvx.compressors`` plugins."""

    fast_path: ClassVar[bool] = False
    #: a registered attention implementation the reader must switch to while this compressor runs
    attn_implementation: ClassVar[str | None] = None
    #: decode positions continue from the compressed cache length (key re-rotation), not the original
    decode_from_cache_length: ClassVar[bool] = False

    def validate(self) -> None:  # noqa: B027 - optional hook, presets without fields have nothing to check
        """Reject invalid fields before any model loads (``ratio`` and ``budget_tokens`` are checked
        once for every compressor by ``kvx.preflight``); raise ``kvx.errors.ConfigError``."""

    #: why a fixed token budget does not apply to this compressor ("" = it does)
    budget_unsupported: ClassVar[str] = ""

    @abstractmethod
    def setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        """Interpret ``ratio`` for this method; unsupported settings say why."""

    def setting_spec(self, ratio: float, budget_tokens: int | None) -> SettingSpec:
        """The setting as the cell identity sees it: a token budget, a ratio, or ``none`` for
        compressors whose own fields fix what they keep (so ratios they ignore are one cell)."""
        if budget_tokens is not None:
            return SettingSpec("budget_tokens", budget_tokens)
        return SettingSpec("ratio", ratio)

    def budget_ratio(self, budget: int, n_context: int) -> float:
        """The kvpress ratio that keeps ``budget`` of ``n_context`` tokens per head."""
        return ratio_for_budget(budget, n_context)

    def resolve(self, spec: SettingSpec, n_context: int, model: PreTrainedModel) -> Setting:
        """The setting on one context: a budget becomes this context's ratio (recorded with both)."""
        if spec.kind == "budget_tokens" and self.budget_unsupported:
            return Setting(0.0, None, {}, False, self.budget_unsupported, spec.kind, spec.value)
        if spec.kind == "budget_tokens":
            ratio = self.budget_ratio(int(spec.value), n_context)
        else:
            ratio = float(spec.value) if spec.kind == "ratio" else 0.0
        setting = self.setting(ratio, n_context, model)
        setting.kind, setting.value = spec.kind, spec.value
        if spec.kind == "budget_tokens" and setting.supported:
            setting.method_parameter["budget_tokens"] = spec.value
        return setting

    @abstractmethod
    def prefill(self, model: PreTrainedModel, context_ids: torch.Tensor, ratio: float) -> Cache:
        """Hook path: prefill ``context_ids`` with compression active and return the cache."""

    def compress_captured(self, model: PreTrainedModel, capture: Capture, ratio: float) -> Cache:
        """Fast path: build the compressed cache from a captured full prefill."""
        raise NotImplementedError(f"{type(self).__name__} has no fast path")

    def retained_map(
        self, model: PreTrainedModel, cache: Cache, capture: Capture | None, ratio: float
    ) -> RetainedMap:
        """The map of the compression that just built ``cache``; N/A unless a subclass knows it."""
        return RetainedMap("not_applicable", reason=f"{type(self).__name__} exposes no original-position map")


def ratio_for_budget(budget: int, n_context: int) -> float:
    """The ratio whose ``n_kept`` is exactly ``budget`` (0 when the budget holds the whole context).

    ``int(n * (1 - r))`` with ``1 - r = (budget + 0.5) / n`` is ``budget`` for every n: the half
    token keeps floating-point error away from the integer boundary."""
    return 0.0 if budget >= n_context else 1.0 - (budget + 0.5) / n_context


def n_kept(k_len: int, ratio: float) -> int:
    """Entries a kvpress ScorerPress keeps per KV head (``compute_n_kept`` in kvpress)."""
    return max(1, int(k_len * (1 - ratio)))
