"""Predictive-distribution drift between FullCache and a compressed cache (KVDiagnosis section 4).

Both logit tensors are teacher-forced on the SAME reference tokens ``y_{1:T}``: row ``t`` is the
next-token distribution that should predict ``gold[t]``. Everything is computed in float64 with
``log_softmax`` so small drifts are not lost to bf16/fp32 rounding. Positive ΔNLL, low GPR/Top-50,
or a positive rank shift records paired drift, not its cause.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:  # imported where used: loading the likelihood plugin must not import torch
    import torch

__all__ = ["DEFAULT_EPS", "DistributionValues", "distribution_metrics", "gold_ranks"]

#: GPR's stabilizer. KVDiagnosis only says "a small constant ε > 0"; kvx fixes it to 1e-6 so
#: that GPR = e^{-NLL^C} / (e^{-NLL^F} + ε) stays finite when FullCache itself is very unsure.
DEFAULT_EPS = 1e-6


class DistributionValues(TypedDict):
    """What :func:`distribution_metrics` returns (plain Python numbers, JSON-ready)."""

    nll_full: float
    nll_comp: float
    delta_nll: float
    gpr: float
    kl: float
    top50: float
    gold_rank_full_first: int
    gold_rank_comp_first: int
    gold_rank_full_mean: float
    gold_rank_comp_mean: float
    rank_shift_first: int
    rank_shift_mean: float
    n_tokens: int


def gold_ranks(logits: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """Rank of the gold token per row: 1 + number of vocab entries with a STRICTLY larger logit.

    Rank 1 is the argmax; a gold token tied with others gets the best (smallest) tied rank.
    Raw logits are compared (cast to float64, which is exact), not renormalized probabilities.
    """
    import torch

    x = logits.to(torch.float64)
    g = x.gather(1, gold.view(-1, 1))
    return 1 + (x > g).sum(dim=1)


def _check(full: torch.Tensor, comp: torch.Tensor, gold: torch.Tensor, k: int) -> None:
    import torch

    if full.dim() != 2 or full.shape != comp.shape:
        raise ValueError(
            f"logits must both be (T, V) with equal shapes, got {tuple(full.shape)} and {tuple(comp.shape)}"
        )
    t, v = full.shape
    if t == 0:
        raise ValueError("no reference tokens (T = 0): NLL is undefined")
    if gold.shape != (t,) or gold.dtype != torch.long:
        raise ValueError(f"gold must be a long tensor of shape ({t},), got {gold.dtype} {tuple(gold.shape)}")
    if int(gold.min()) < 0 or int(gold.max()) >= v:
        raise ValueError(f"gold token ids must lie in [0, {v})")
    if not 1 <= k <= v:
        # Clamping k to V would make Top-k overlap identically 1, a silent non-measurement.
        raise ValueError(f"top-k overlap needs 1 <= k <= vocabulary size {v}, got k={k}")
    if torch.isnan(full).any() or torch.isnan(comp).any():
        raise ValueError("logits contain NaN")


def distribution_metrics(
    full_logits: torch.Tensor,
    comp_logits: torch.Tensor,
    gold: torch.Tensor,
    eps: float = DEFAULT_EPS,
    k: int = 50,
) -> DistributionValues:
    """ΔNLL, GPR, KL, Top-k overlap and gold-rank shift from paired teacher-forced logits.

    - ``NLL = -(1/T) Σ_t log p_t(y_t)`` for each cache; ``ΔNLL = NLL^C - NLL^F``.
    - ``GPR = e^{-NLL^C} / (e^{-NLL^F} + eps)`` (``eps`` defaults to :data:`DEFAULT_EPS` = 1e-6).
    - ``kl`` = mean_t KL(p^F_t || p^C_t), full→compressed, natural log (terms with p^F = 0 are 0).
    - ``top50`` = mean_t |TopK(p^F_t) ∩ TopK(p^C_t)| / k (named for the paper's k = 50; ties at
      the k-th place are broken by ``torch.topk``). ``k`` must satisfy 1 <= k <= V, else ValueError.
    - gold ranks per :func:`gold_ranks`; ``*_first`` is t = 0, ``*_mean`` averages over t, and
      shifts are compressed minus full (positive = gold token pushed down).
    """
    import torch

    _check(full_logits, comp_logits, gold, k)
    gold = gold.to(full_logits.device)
    lf = torch.log_softmax(full_logits.to(torch.float64), dim=-1)
    lc = torch.log_softmax(comp_logits.to(torch.float64), dim=-1)
    idx = gold.view(-1, 1)
    nll_full = float(-lf.gather(1, idx).mean())
    nll_comp = float(-lc.gather(1, idx).mean())

    pf = lf.exp()
    terms = torch.where(pf > 0, pf * (lf - lc), torch.zeros_like(pf))
    kl = float(terms.sum(dim=-1).mean())

    t, v = lf.shape
    top_f = torch.zeros(t, v, dtype=torch.bool, device=lf.device)
    top_c = torch.zeros_like(top_f)
    top_f.scatter_(1, lf.topk(k, dim=-1).indices, True)
    top_c.scatter_(1, lc.topk(k, dim=-1).indices, True)
    top = float(((top_f & top_c).sum(dim=-1).to(torch.float64) / k).mean())

    rf = gold_ranks(full_logits, gold)
    rc = gold_ranks(comp_logits, gold)
    rf_mean = float(rf.to(torch.float64).mean())
    rc_mean = float(rc.to(torch.float64).mean())
    return DistributionValues(
        nll_full=nll_full,
        nll_comp=nll_comp,
        delta_nll=nll_comp - nll_full,
        gpr=math.exp(-nll_comp) / (math.exp(-nll_full) + eps),
        kl=kl,
        top50=top,
        gold_rank_full_first=int(rf[0]),
        gold_rank_comp_first=int(rc[0]),
        gold_rank_full_mean=rf_mean,
        gold_rank_comp_mean=rc_mean,
        rank_shift_first=int(rc[0]) - int(rf[0]),
        rank_shift_mean=rc_mean - rf_mean,
        n_tokens=t,
    )
