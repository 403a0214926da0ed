"""The model's attention layers as kvx addresses them: which ones a press compresses, and the
per-head masks an AdaKV compression leaves on them (cleared before any FullCache forward)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel


def attention_layers(model: PreTrainedModel) -> list[torch.nn.Module]:
    """The self-attention modules kvpress hooks, in layer order."""
    inner = model.model.language_model if hasattr(model.model, "language_model") else model.model
    for layer in inner.layers:
        layer.self_attn.rotary_emb = inner.rotary_emb  # kvpress sets this in its hook, too
    return [layer.self_attn for layer in inner.layers]


def compressed_layers(model: PreTrainedModel) -> list[int]:
    """The layers a press compresses: full-attention ones only, where the config names layer types.

    A sliding-window layer keeps its whole cache, as kvpress does for multimodal Gemma3 (it hooks
    text-only Gemma3 everywhere): evicting there lets the window reach tokens far outside it, and
    Gemma-3-270M then answers nothing but a newline.
    """
    types = getattr(model.config.get_text_config(), "layer_types", None)
    if types is None:
        return list(range(len(attention_layers(model))))
    return [idx for idx, kind in enumerate(types) if kind == "full_attention"]


def compressed_flags(model: PreTrainedModel) -> list[bool]:
    """Per layer, whether a press compresses it (``RetainedMap.compressed``)."""
    layers = compressed_layers(model)
    return [idx in layers for idx in range(len(attention_layers(model)))]


def clear_head_masks(model: PreTrainedModel) -> None:
    """Forget AdaKV-style masked key indices left on attention modules by an earlier cache."""
    for module in attention_layers(model):
        module.masked_key_indices = None
