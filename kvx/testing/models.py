"""Tiny random-weight models saved in the formats kvx loads: what a test needs instead of the hub."""

from __future__ import annotations

from pathlib import Path


def save_tiny_bert(folder: Path, words: list[str], model_class: type | None = None) -> str:
    """A tiny random BERT (WordPiece over ``words``, 1 layer of width 32) saved to ``folder``."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n"
    )
    BertTokenizerFast(str(folder / "vocab.txt"), do_lower_case=False).save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(words) + 5,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
    )
    (model_class or BertModel)(config).save_pretrained(folder)
    return str(folder)
