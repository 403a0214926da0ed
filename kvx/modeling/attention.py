"""An SDPA attention that builds its own bottom-right causal mask from the real key length.

Transformers sizes one mask for all layers from layer 0's cache length. Presses that leave
layers with different lengths (PyramidKV) then crash on any multi-token forward. This
implementation ignores the shared mask (its mask function returns None) and masks each layer
by its own key length, and by the layer's ``sliding_window`` where the model passes one (Gemma3's
local layers, which kvx leaves whole, so cache rows are positions there as the window assumes);
kvpress's head-mask patch is applied to it like to the built-ins.
"""

from __future__ import annotations

from typing import Any

import torch
from kvpress.attention_patch import attention_patch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface

NAME = "kvx_sdpa"
EAGER = "kvx_eager"


def _no_mask(*args: Any, **kwargs: Any) -> None:
    return None


def per_layer_causal_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    mask = _causal_mask(query.shape[2], key.shape[2], query.device, kwargs.get("sliding_window"))
    return sdpa_attention_forward(module, query, key, value, mask, dropout, is_causal=False, **kwargs)


def _causal_mask(q_len: int, k_len: int, device: torch.device, window: int | None) -> torch.Tensor | None:
    """Bottom-right causal mask, limited to the last ``window`` keys (itself included) when given."""
    if q_len == 1 and (window is None or k_len <= window):
        return None
    # query i sits at absolute key index (k_len - q_len + i) and sees keys up to it
    rows = torch.arange(q_len, device=device).unsqueeze(1) + (k_len - q_len)
    cols = torch.arange(k_len, device=device).unsqueeze(0)
    mask = cols <= rows
    if window is not None:
        mask &= cols > rows - window  # transformers' sliding_window_overlay
    return mask.view(1, 1, q_len, k_len)


def per_layer_causal_eager(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager attention with the per-layer mask, returning the weights (attention replays).

    ``module.kvx_logit_bias`` (kv_heads, n) when set is added to the logits of the first n keys:
    the evidence-boost intervention."""
    groups = query.shape[1] // key.shape[1]
    k = key.repeat_interleave(groups, dim=1)
    v = value.repeat_interleave(groups, dim=1)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    logits = torch.matmul(query, k.transpose(2, 3)) * scale
    bias = getattr(module, "kvx_logit_bias", None)
    if bias is not None:
        n = bias.shape[-1]
        logits[..., :n] = logits[..., :n] + bias.repeat_interleave(groups, dim=0)[:, None, :].to(logits.dtype)
    mask = _causal_mask(query.shape[2], key.shape[2], query.device, kwargs.get("sliding_window"))
    if mask is not None:
        logits = logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
    weights = torch.softmax(logits, dim=-1, dtype=torch.float32).to(query.dtype)
    out = torch.matmul(weights, v).transpose(1, 2).contiguous()
    return out, weights


def register() -> str:
    """Register the implementations once; returns the SDPA one's name for ``set_attn_implementation``."""
    AttentionInterface.register(NAME, attention_patch(per_layer_causal_sdpa))
    AttentionMaskInterface.register(NAME, _no_mask)
    AttentionInterface.register(EAGER, attention_patch(per_layer_causal_eager))
    AttentionMaskInterface.register(EAGER, _no_mask)
    return NAME
