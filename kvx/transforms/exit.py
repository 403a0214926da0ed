"""EXIT (Hwang et al., 2024): context-aware extractive compression, for users with a model hub.

Each sentence of each passage is classified in the context of its whole passage by a causal LM
fine-tuned to answer "Yes" or "No" to whether the sentence helps answer the query; sentences with
P(Yes) / (P(Yes) + P(No)) >= ``threshold`` are kept in supplied order. The default checkpoint is
the paper's Gemma-2B adapter (loading it needs ``peft``); offline every row is ``Unsupported``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvx.core.checks import check_number
from kvx.core.source import Segment, Source
from kvx.modeling.hub import check_model, hub_model
from kvx.transforms.base import Transform, query
from kvx.transforms.extractive import rewrite_passages, sentences

MODEL = "doubleyyh/exit-gemma-2b"
PROMPT = (
    "Query:\n{query}\nFull context:\n{context}\nSentence:\n{sentence}\n"
    'Is this sentence useful in answering the query? Answer only "Yes" or "No".'
)


def _load(model: str) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoTokenizer.from_pretrained(model), AutoModelForCausalLM.from_pretrained(model).eval()


@dataclass
class Exit(Transform):
    """``transform=exit transform.threshold=0.5``."""

    threshold: float = 0.5
    model: str = MODEL

    def validate(self) -> None:
        check_number("transform.threshold", self.threshold, 0.0, 1.0)
        check_model("transform.model", self.model)

    def apply(self, source: Source) -> Sequence[Segment]:
        question = query(source)

        def keep(_: Segment, body: str) -> str:
            return " ".join(s for s in sentences(body) if self.p_yes(question, body, s) >= self.threshold)

        return rewrite_passages(source, keep)

    def p_yes(self, question: str, context: str, sentence: str) -> float:
        """P("Yes") against P("No") for the next token after the classification prompt."""
        import torch

        tokenizer, model = hub_model("EXIT", self.model, _load)
        text = PROMPT.format(query=question, context=context, sentence=sentence)
        if tokenizer.chat_template is not None:
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
            )
        yes, no = (tokenizer.encode(word, add_special_tokens=False)[0] for word in ("Yes", "No"))
        with torch.inference_mode():
            ids = tokenizer(text, return_tensors="pt", add_special_tokens=tokenizer.chat_template is None)
            logits = model(**ids).logits[0, -1, [yes, no]].float()
        return float(torch.softmax(logits, dim=0)[0])
