"""Abstractive summary (ragscale's abstractive text compressor): a designated compressor reader writes
one summary of the candidate passages per row, greedily, and the panel's readers all get that text.

The compressor reader is any kvx reader (``transform.reader``, its fields in
``transform.reader_fields``): an in-process one is loaded once per process beside the panel's reader
(never replacing it); a served one (``transform.reader=openai``, e.g. a 14B model behind vLLM, as in
ragscale's worked example) is asked through its endpoint. Outputs go through the artifact store like
every transform, so a summary is written once per (row, config) and replayed byte-identically to every
reader.

``transform.draw=K`` (K > 0) is a fresh summary draw (ragscale Table 16 / B.6: repeated summary artifacts
of one compressor, each its own evidence condition): sampled at ``draw_temperature`` with seed K, from
the in-process compressor's own distribution or as the served request's ``seed``; each draw is stored
apart. Draw 0 is the greedy summary, and its cells keep their ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kvx.core.checks import check_int, check_number
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
    #: 0: the greedy summary; K > 0: a fresh draw sampled with seed K
    draw: int = field(default=0, metadata=WHEN_SET)
    draw_temperature: float = field(default=1.0, metadata=WHEN_SET)
    _loaded: Any = field(default=None, init=False, repr=False, compare=False)

    def validate(self) -> None:
        check_int("transform.max_new_tokens", self.max_new_tokens, 1)
        check_int("transform.draw", self.draw, 0)
        check_number("transform.draw_temperature", self.draw_temperature, 1e-6)
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
            options = {"temperature": self.draw_temperature, "seed": self.draw} if self.draw else {}
            request = ChatRequest.of([{"role": "user", "content": text}], self.max_new_tokens, options)
            (reply,) = loaded.complete([request], progress=False)
            if isinstance(reply, Exception):
                raise reply
            return reply.text.strip()
        prompt = loaded.encode(f"{INSTRUCTION}\n\n{documents}", f"\n\nQuestion: {question}\nSummary:")
        cache = DynamicCache()
        with torch.inference_mode(), loaded.autocast():
            loaded.model(input_ids=prompt.context_ids, past_key_values=cache)
            start, budget = int(prompt.context_ids.shape[1]), self.max_new_tokens
            if self.draw:
                return self._sample(loaded, cache, prompt.question_ids, start).strip()
            gen = greedy_decode(loaded.model, loaded.tokenizer, cache, prompt.question_ids, start, budget)
        return gen.text.strip()

    def _sample(self, loaded: Any, cache: Any, feed: Any, start: int) -> str:
        """Draw ``self.draw``: tokens sampled from softmax(logits / temperature) with a generator
        seeded by the draw, until end of sequence or the budget."""
        import torch

        from kvx.modeling.generation import eos_ids

        generator = torch.Generator(device=feed.device).manual_seed(self.draw)
        stop, ids = set(eos_ids(loaded.model)), []
        for _ in range(self.max_new_tokens):
            positions = torch.arange(start, start + feed.shape[1], device=feed.device).unsqueeze(0)
            out = loaded.model(
                input_ids=feed, past_key_values=cache, position_ids=positions, logits_to_keep=1
            )
            probs = torch.softmax(out.logits[0, -1].float() / self.draw_temperature, -1)
            feed = torch.multinomial(probs, 1, generator=generator).view(1, 1)
            start += positions.shape[1]
            ids.append(int(feed))
            if ids[-1] in stop:
                break
        return loaded.tokenizer.decode(ids, skip_special_tokens=True)

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
