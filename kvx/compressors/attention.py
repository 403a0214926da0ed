"""An SDPA attention that builds its own bottom-right causal mask from the real key length.

Transformers sizes one mask for all layers from layer 0's cache length. Presses that leave
layers with different lengths (PyramidKV) then crash on any multi-token forward. This
implementation ignores the shared mask (its mask function returns None) and masks each layer
by its own key length; kvpress's head-mask patch is applied to it like to the built-ins.
"""

from __future__ import annotations

from typing import Any

import torch
from kvpress.attention_patch import attention_patch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface

NAME = "kvx_sdpa"


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
    q_len, k_len = query.shape[2], key.shape[2]
    mask = None
    if q_len > 1:
        # query i sits at absolute key index (k_len - q_len + i) and sees keys up to it
        rows = torch.arange(q_len, device=query.device).unsqueeze(1) + (k_len - q_len)
        mask = (torch.arange(k_len, device=query.device).unsqueeze(0) <= rows).view(1, 1, q_len, k_len)
    return sdpa_attention_forward(module, query, key, value, mask, dropout, is_causal=False, **kwargs)


def register() -> str:
    """Register the implementation once; returns its name for ``set_attn_implementation``."""
    AttentionInterface.register(NAME, attention_patch(per_layer_causal_sdpa))
    AttentionMaskInterface.register(NAME, _no_mask)
    return NAME
