"""A kvpress press in kvpress's one-press-per-file style, usable without kvx."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from kvpress.presses.scorer_press import ScorerPress
from torch import nn


@dataclass
class ValueNormPress(ScorerPress):
    """
    Value-norm KV cache compression: keeps the entries whose value vectors have the largest
    L2 norm, on the idea that small values contribute little to any attention output.

    Parameters
    ----------
    compression_ratio : float, default=0.0
        Fraction of key-value pairs to remove during compression.
    n_sink : int, default=4
        Initial tokens always kept (attention sinks), whatever their value norm.
    """

    compression_ratio: float = 0.0
    n_sink: int = 4

    def __post_init__(self) -> None:
        super().__post_init__()
        assert self.n_sink >= 0, "n_sink must be non-negative"

    def score(
        self,
        module: nn.Module,
        hidden_states: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        attentions: torch.Tensor,
        kwargs: dict,
    ) -> torch.Tensor:
        # float32 at least, so low-precision caches do not tie distinct positions (as KnormPress)
        score_dtype = torch.promote_types(values.dtype, torch.float32)
        scores = torch.linalg.vector_norm(values, dim=-1, dtype=score_dtype)
        scores[..., : self.n_sink] = float("inf")
        return scores
