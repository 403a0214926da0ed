"""A tiny random-weight Llama with a byte-level tokenizer, built in-process for tests (seconds)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvx.core.checks import check_int
from kvx.core.errors import ConfigError
from kvx.readers.base import Reader

if TYPE_CHECKING:
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _byte_core() -> Tokenizer:
    """The byte-level BPE both tokenizers below are built on (``tokenizers`` only: no transformers)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate(SPECIALS + sorted(alphabet))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    return core


def byte_counter() -> Callable[[str], int]:
    """``byte_tokenizer``'s token count (``encode(text, add_special_tokens=False)``) in a few
    milliseconds: the same core with the specials matched whole, as transformers registers them,
    without importing transformers (seconds)."""
    from tokenizers import AddedToken

    core = _byte_core()
    core.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    return lambda text: len(core.encode(text, add_special_tokens=False).ids)


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """One token per byte plus ChatML specials: a real fast tokenizer with no files to fetch."""
    from transformers import PreTrainedTokenizerFast

    core = _byte_core()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


@dataclass
class TinyLlama(Reader):
    """Random-weight Llama (2 layers, GQA) for tests; ``seed`` fixes the weights."""

    seed: int = 0
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    accelerator: str = "cpu"
    precision: str = "32-true"

    def validate(self) -> None:
        super().validate()
        check_int("reader.seed", self.seed)
        for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads"):
            check_int(f"reader.{key}", getattr(self, key), 1)
        if self.hidden_size % self.num_attention_heads or self.num_attention_heads % self.num_key_value_heads:
            heads, kv_heads = self.num_attention_heads, self.num_key_value_heads
            raise ConfigError(
                f"reader.hidden_size={self.hidden_size}, reader.num_attention_heads={heads} and "
                f"reader.num_key_value_heads={kv_heads}: each must divide the one before"
            )

    def token_counter(self) -> Callable[[str], int]:
        return byte_counter()  # the tokenizer does not depend on the fields

    def load_model(self) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast, str]:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        tok = byte_tokenizer()
        config = LlamaConfig(
            vocab_size=len(tok),
            hidden_size=self.hidden_size,
            intermediate_size=self.hidden_size * 2,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            max_position_embeddings=8192,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            attn_implementation="sdpa",
        )
        torch.manual_seed(self.seed)
        model = LlamaForCausalLM(config)
        model.generation_config.eos_token_id = tok.eos_token_id
        return model, tok, f"random-seed-{self.seed}"
