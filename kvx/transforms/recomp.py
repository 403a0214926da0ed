"""RECOMP (Xu et al., 2024): trained compressors of retrieved documents, for users with a model hub.

- ``recomp_extractive``: a dual encoder (Contriever-style, mean-pooled) scores each sentence of the
  pool against the question; the ``k`` best sentences are kept in supplied order (ties: earlier).
- ``recomp_abstractive``: a T5 summarizer writes one summary of the top passages from
  ``Question: ... Document: ... Summary:``, greedily, up to ``max_new_tokens``.

ragscale's HotpotQA artifact ranks the ten paragraphs with BM25 and compresses the top five
(``top_passages``). Offline the checkpoints are unreachable and every row is ``Unsupported``.

RECOMP may return nothing (its selective augmentation: an empty summary; for the extractive compressor,
no sentence scoring ``min_score`` or more). ``raw_fallback`` then gives the reader the row's raw input
unchanged instead of an empty passage: ragscale's NQ-Open setting "RECOMP with raw fallback", the
"raw-evidence fallback" its MuSiQue replay counts (section B.6). Both fields are unset by default and
then leave a cell's identity as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kvx.core.checks import check_int
from kvx.core.errors import Unsupported
from kvx.core.identity import WHEN_SET
from kvx.core.ranking import bm25_scores, top_k
from kvx.core.source import Segment, Source
from kvx.modeling.hub import check_model, hub_model
from kvx.transforms.base import Transform, query
from kvx.transforms.extractive import header, sentences

EXTRACTIVE = "fangyuan/hotpotqa_extractive_compressor"
ABSTRACTIVE = "fangyuan/hotpotqa_abstractive"


def _passages(source: Source, top: int) -> tuple[list[Segment], list[Segment]]:
    """(non-passage segments, the ``top`` passages BM25 ranks highest in supplied order; 0: all)."""
    parts = source.parts()
    pool = [s for s in parts if s.role == "passage"]
    if not pool:
        raise Unsupported(f"source {source.id} has no passage segments to compress")
    if top and top < len(pool):
        pool = [pool[i] for i in sorted(top_k(bm25_scores(query(source), [s.text for s in pool]), top))]
    return [s for s in parts if s.role != "passage"], pool


def _compressed(source: Source, rest: list[Segment], text: str, raw_fallback: bool) -> list[Segment]:
    """RECOMP's one passage, or with ``raw_fallback`` the row's raw input when RECOMP kept nothing."""
    if raw_fallback and not text:
        return list(source.parts())
    return [*rest, Segment("recomp", text, role="passage", title="RECOMP")]


def _load_encoder(model: str) -> tuple[Any, Any]:
    from transformers import AutoModel, AutoTokenizer

    return AutoTokenizer.from_pretrained(model), AutoModel.from_pretrained(model).eval()


def _load_seq2seq(model: str) -> tuple[Any, Any]:
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    return AutoTokenizer.from_pretrained(model), AutoModelForSeq2SeqLM.from_pretrained(model).eval()


@dataclass
class RecompExtractive(Transform):
    """``transform=recomp_extractive transform.k=2``."""

    k: int = 2
    top_passages: int = 5
    model: str = EXTRACTIVE
    #: of the ``k`` best sentences, only those scoring at least this are kept (None: all ``k``)
    min_score: float | None = field(default=None, metadata=WHEN_SET)
    #: when no sentence is kept, the reader gets the raw input (module docstring)
    raw_fallback: bool = field(default=False, metadata=WHEN_SET)

    def validate(self) -> None:
        check_int("transform.k", self.k, 1)
        check_int("transform.top_passages", self.top_passages, 0)
        check_model("transform.model", self.model)

    def apply(self, source: Source) -> Sequence[Segment]:
        rest, pool = _passages(source, self.top_passages)
        flat = [(seg, sent) for seg in pool for sent in sentences(seg.text.removeprefix(header(seg)))]
        if not flat and not self.raw_fallback:
            raise Unsupported(f"source {source.id} has no sentences to select")
        scores = self.scores(query(source), [sent for _, sent in flat]) if flat else []
        kept = sorted(
            i for i in top_k(scores, self.k) if self.min_score is None or scores[i] >= self.min_score
        )
        return _compressed(source, rest, " ".join(flat[i][1] for i in kept), self.raw_fallback)

    def scores(self, question: str, texts: list[str]) -> list[float]:
        """Inner products of mean-pooled embeddings (Contriever's scoring)."""
        import torch

        tokenizer, encoder = hub_model("RECOMP extractive", self.model, _load_encoder)
        with torch.inference_mode():
            batch = tokenizer([question, *texts], padding=True, truncation=True, return_tensors="pt")
            hidden = encoder(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            emb = (hidden * mask).sum(1) / mask.sum(1)
        return [float(x) for x in emb[1:] @ emb[0]]


@dataclass
class RecompAbstractive(Transform):
    """``transform=recomp_abstractive transform.max_new_tokens=128``."""

    top_passages: int = 5
    max_new_tokens: int = 128
    model: str = ABSTRACTIVE
    #: an empty summary gives the reader the raw input (module docstring)
    raw_fallback: bool = field(default=False, metadata=WHEN_SET)

    def validate(self) -> None:
        check_int("transform.top_passages", self.top_passages, 0)
        check_int("transform.max_new_tokens", self.max_new_tokens, 1)
        check_model("transform.model", self.model)

    def apply(self, source: Source) -> Sequence[Segment]:
        import torch

        rest, pool = _passages(source, self.top_passages)
        tokenizer, model = hub_model("RECOMP abstractive", self.model, _load_seq2seq)
        documents = "\n".join(s.text for s in pool)
        prompt = f"Question: {query(source)}\n Document: {documents}\n Summary: "
        with torch.inference_mode():
            ids = tokenizer(prompt, truncation=True, return_tensors="pt")
            out = model.generate(**ids, max_new_tokens=self.max_new_tokens, do_sample=False, num_beams=1)
        text = tokenizer.decode(out[0], skip_special_tokens=True).strip()
        return _compressed(source, rest, text, self.raw_fallback)
