"""LLMLingua turn selectors (TPBench §5): prompt-compressor word/token scores averaged per turn.

Both selectors score the newline-joined dialogue in one go, so a turn's score is relative to the
other turns (compressing each turn alone would keep about the same share of every turn), average the
scores over each turn's words or tokens, and keep the ``k`` best turns (ties: the earlier turn).
Both run llmlingua's ``PromptCompressor`` offline on the CPU (``kvx.modeling.lingua``).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from kvx.core.checks import check_number
from kvx.core.errors import ConfigError
from kvx.core.ranking import top_k
from kvx.modeling.lingua import check_llmlingua, prompt_compressor
from kvx.turn_selectors.attention_proxy import join_turns, token_turns, turn_scores
from kvx.turn_selectors.base import Turn, TurnSelector

if TYPE_CHECKING:
    from llmlingua import PromptCompressor

LLMLINGUA2_MODEL = "microsoft/llmlingua-2-xlm-roberta-large-meetingbank"
#: llmlingua 0.2.2 picks its word splitting by these substrings of the model name
LLMLINGUA2_FAMILIES = ("xlm-roberta-large", "bert-base-multilingual-cased")
WORD_SEP = "\t\t|\t\t"
LABEL_SEP = " "


def parse_labels(labeled: str) -> tuple[list[str], list[int]]:
    """Words and 0/1 labels from llmlingua's ``fn_labeled_original_prompt``."""
    words, labels = [], []
    for item in labeled.split(WORD_SEP) if labeled else []:
        word, label = item.rsplit(LABEL_SEP, 1)
        words.append(word)
        labels.append(int(label))
    return words, labels


def word_offsets(text: str, words: Sequence[str]) -> list[tuple[int, int]]:
    """Each word's [start, end) in ``text``, searched in order from the previous match; (0, 0) for a
    word the tokenizer normalised beyond recognition (it then counts for no turn)."""
    offsets, cursor = [], 0
    for word in words:
        pos = text.find(word, cursor) if word else -1
        if pos < 0:
            offsets.append((0, 0))
            continue
        offsets.append((pos, pos + len(word)))
        cursor = pos + len(word)
    return offsets


@dataclass
class _Compressed(TurnSelector):
    """An llmlingua ``PromptCompressor``, built once per process; a hub model that cannot be fetched
    makes every later ``select`` raise ``Unsupported`` at once instead of retrying the hub."""

    rounding: ClassVar[str] = "floor"
    label: ClassVar[str]

    model: str

    def validate(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError(f"turn_selector.model={self.model!r} must be a model folder or hub id")
        check_llmlingua(f"the {self.label} turn selector")

    def select(self, turns: Sequence[Turn], k: int, dialogue_id: str) -> list[int]:
        return list(range(len(turns))) if k >= len(turns) else top_k(self.scores(turns), k)

    @abstractmethod
    def scores(self, turns: Sequence[Turn]) -> list[float]:
        """One score per turn; the ``k`` best turns are kept."""

    def _load(self, **kwargs: object) -> PromptCompressor:
        return prompt_compressor(self.model, self.label, **kwargs)


@dataclass
class LongLLMLingua(_Compressed):
    """LLMLingua's token importance averaged per turn.

    Exactly: the self-information ``-log p(x_i | x_<i)`` of every token of the newline-joined
    dialogue under a small causal LM (llmlingua's ``PromptCompressor.get_ppl`` at token granularity,
    the score LLMLingua/LongLLMLingua's token-level compression keeps tokens by: higher loss = more
    informative), averaged over each turn's tokens. A selector sees no question, so LongLLMLingua's
    question-conditioned (contrastive) perplexity does not apply; the score is question-free. The
    first token has no prediction and tokens past the model's context window are not scored.
    """

    label: ClassVar[str] = "LongLLMLingua"

    #: "smollm2": the embedded SmolLM2-135M-Instruct reader's converted local folder; otherwise a
    #: local Hugging Face folder or hub id of a causal LM
    model: str = "smollm2"

    def scores(self, turns: Sequence[Turn]) -> list[float]:
        """Per turn, the mean self-information of its tokens."""
        compressor = self._load()
        text, spans = join_turns(turns)
        enc = compressor.tokenizer(text, return_offsets_mapping=True, return_tensors="pt")
        if enc["input_ids"].shape[1] < 2:
            return [0.0] * len(turns)
        loss = compressor.get_ppl(
            text,
            granularity="token",
            input_ids=enc["input_ids"].to(compressor.device),
            attention_mask=enc["attention_mask"].to(compressor.device),
        )
        offsets = [tuple(pair) for pair in enc["offset_mapping"][0, 1 : 1 + len(loss)].tolist()]
        return turn_scores(loss.tolist(), token_turns(offsets, spans), len(turns))


@dataclass
class LLMLingua2(_Compressed):
    """TPBench's LLMLingua-2 selector: the model's binary word-retention labels at its own token rate
    ``rate`` (separate from the turn budget), averaged per turn.

    The labels come from ``compress_prompt_llmlingua2(..., return_word_label=True)``; llmlingua
    thresholds them within each chunk of at most 512 model tokens.
    """

    label: ClassVar[str] = "LLMLingua-2"

    #: a token-classification model llmlingua 0.2.2 supports (name contains xlm-roberta-large or
    #: bert-base-multilingual-cased): the paper's hub id, or a local folder holding a copy
    model: str = LLMLINGUA2_MODEL
    #: the share of tokens the label model keeps
    rate: float = 0.5

    def validate(self) -> None:
        super().validate()
        if not any(family in self.model for family in LLMLINGUA2_FAMILIES):
            raise ConfigError(
                f"turn_selector.model={self.model!r}: llmlingua 0.2.2 only runs LLMLingua-2 models whose "
                f"name contains {' or '.join(LLMLINGUA2_FAMILIES)}"
            )
        if check_number("turn_selector.rate", self.rate, 0.0, 1.0) == 0.0:
            raise ConfigError("turn_selector.rate=0 keeps no word; use a rate in (0, 1]")

    def scores(self, turns: Sequence[Turn]) -> list[float]:
        """Per turn, the share of its words the label model keeps."""
        compressor = self._load(use_llmlingua2=True)
        text, spans = join_turns(turns)
        if not text.strip():
            return [0.0] * len(turns)
        result = compressor.compress_prompt_llmlingua2(
            [text], rate=self.rate, return_word_label=True, word_sep=WORD_SEP, label_sep=LABEL_SEP
        )
        words, labels = parse_labels(result["fn_labeled_original_prompt"])
        return turn_scores(labels, token_turns(word_offsets(text, words), spans), len(turns))
