"""Abstractive summary (ragscale's abstractive text compressor): a designated compressor reader writes
one summary of the candidate passages per row, greedily, and the panel's readers all get that text.

The compressor reader is any kvx reader (``transform.reader``, its fields in
``transform.reader_fields``): an in-process one is loaded once per process beside the panel's reader
(never replacing it); a served one (``transform.reader=openai``, e.g. a 14B model behind vLLM, as in
ragscale's worked example) is asked through its endpoint. Outputs go through the artifact store like
every transform, so a summary is written once per (row, config) and replayed byte-identically to every
reader.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kvx.core.checks import check_int
from kvx.core.errors import ConfigError, Unsupported
from kvx.core.identity import WHEN_SET
from kvx.core.source import Segment, Source
from kvx.transforms.base import Transform, query

INSTRUCTION = "Summarize the documents below into the facts needed to answer the question."


@dataclass
class Summary(Transform):
    """``transform=summary transform.reader=smollm2 transform.max_new_tokens=128``."""

    reader: str = "smollm2"
    max_new_tokens: int = 128
    #: the compressor reader's fields, e.g. {base_url: ..., model: ...} for reader=openai
    reader_fields: dict[str, Any] = field(default_factory=dict, metadata=WHEN_SET)
    _loaded: Any = field(default=None, init=False, repr=False, compare=False)

    def validate(self) -> None:
        check_int("transform.max_new_tokens", self.max_new_tokens, 1)
        if not isinstance(self.reader, str) or not self.reader:
            raise ConfigError(f"transform.reader={self.reader!r} must name a kvx reader")
        config = self._config()
        config.validate()
        if hasattr(config, "preflight"):  # a served compressor: its server answers
            config.preflight()

    def _config(self) -> Any:
        """The compressor reader as configured (an unknown name: the registry's "did you mean")."""
        from kvx.core.registry import registry

        cls = registry("reader").get(self.reader)
        try:
            return cls(**dict(self.reader_fields or {}))
        except TypeError as exc:
            raise ConfigError(f"transform.reader_fields={dict(self.reader_fields)!r}: {exc}") from None

    def apply(self, source: Source) -> Sequence[Segment]:
        parts = source.parts()
        pool = [s for s in parts if s.role == "passage"]
        if not pool:
            raise Unsupported(f"source {source.id} has no passage segments to summarize")
        text = self.summarize("\n\n".join(s.text for s in pool), query(source))
        rest = [s for s in parts if s.role != "passage"]
        return [*rest, Segment("summary", text, role="passage", title="Summary")]

    def summarize(self, documents: str, question: str) -> str:
        import torch  # preflight loads every built-in transform: no framework at import time
        from transformers import DynamicCache

        from kvx.modeling.generation import greedy_decode

        loaded = self._reader()
        if hasattr(loaded, "complete"):  # a served compressor (a chat model): one chat request
            from kvx.modeling.chat import ChatRequest

            text = f"{INSTRUCTION}\n\n{documents}\n\nQuestion: {question}\nSummary:"
            (reply,) = loaded.complete([ChatRequest((("user", text),), self.max_new_tokens)], progress=False)
            if isinstance(reply, Exception):
                raise reply
            return reply.text.strip()
        prompt = loaded.encode(f"{INSTRUCTION}\n\n{documents}", f"\n\nQuestion: {question}\nSummary:")
        cache = DynamicCache()
        with torch.inference_mode(), loaded.autocast():
            loaded.model(input_ids=prompt.context_ids, past_key_values=cache)
            start, budget = int(prompt.context_ids.shape[1]), self.max_new_tokens
            gen = greedy_decode(loaded.model, loaded.tokenizer, cache, prompt.question_ids, start, budget)
        return gen.text.strip()

    def _reader(self) -> Any:
        """The compressor reader, loaded for this transform only (the panel's reader stays loaded), or
        a served one's endpoint (its summaries kept by the artifact store, not a response cache)."""
        if self._loaded is None:
            from kvx.modeling.reader import build_reader

            config = self._config()
            self._loaded = (
                config.endpoint(None)
                if getattr(config, "served", False)
                else build_reader(self.reader, config)
            )
        return self._loaded
