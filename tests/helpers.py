"""Helpers several test modules share (tests/ is on sys.path under pytest's default import mode)."""

from __future__ import annotations


def save_tiny_bert(folder, words, model_class=None):
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


def run_kvx(folder, *args: str) -> None:
    """``python -m kvx -m ARGS`` in ``folder`` as a user runs it; fails the test with its stderr."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "kvx", "-m", *args], cwd=folder, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
