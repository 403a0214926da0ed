"""What a compression setting means on one context, and which original positions it kept.

Compressors produce these, the pipeline records them and diagnostics read them, so they live
below all three."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


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


def ratio_for_budget(budget: int, n_context: int) -> float:
    """The ratio whose ``n_kept`` is exactly ``budget`` (0 when the budget holds the whole context).

    ``int(n * (1 - r))`` with ``1 - r = (budget + 0.5) / n`` is ``budget`` for every n: the half
    token keeps floating-point error away from the integer boundary."""
    return 0.0 if budget >= n_context else 1.0 - (budget + 0.5) / n_context


def n_kept(k_len: int, ratio: float) -> int:
    """Entries a kvpress ScorerPress keeps per KV head (``compute_n_kept`` in kvpress)."""
    return max(1, int(k_len * (1 - ratio)))
