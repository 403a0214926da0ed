"""Any Hugging Face causal LM by id and revision: the reader real users run on GPUs."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from kvx.errors import ConfigError
from kvx.readers.base import Reader

LOAD_DTYPES = {"bf16-true": torch.bfloat16, "16-true": torch.float16}


@dataclass
class HFReader(Reader):
    """``reader=hf reader.model_id=Qwen/Qwen3-8B reader.revision=<sha> reader.precision=bf16-true``.

    The resolved commit of ``revision`` is recorded with every run, so "main" is never ambiguous.
    """

    model_id: str = ""
    revision: str = "main"
    attn_implementation: str = "sdpa"
    trust_remote_code: bool = False
    accelerator: str = "auto"
    precision: str = "bf16-true"

    def validate(self) -> None:
        super().validate()
        if not self.model_id:
            raise ConfigError("reader=hf needs reader.model_id=<hub id or local folder>")

    def load_model(self) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, str]:
        tok = AutoTokenizer.from_pretrained(
            self.model_id, revision=self.revision, trust_remote_code=self.trust_remote_code
        )
        model = AutoModelForCausalLM.from_pretrained(
            self.model_id,
            revision=self.revision,
            dtype=LOAD_DTYPES.get(self.precision, torch.float32),  # never materialise 8B in fp32
            attn_implementation=self.attn_implementation,
            trust_remote_code=self.trust_remote_code,
        )
        resolved = getattr(model.config, "_commit_hash", None) or self.revision
        return model, tok, str(resolved)
