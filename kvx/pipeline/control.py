"""Control stage: each source's FullCache answer, the uncompressed run every compressed answer is
paired with.

A control is looked up in the control store first (``kvx.stores.controls``); a missing one is decoded
once, in the same batch as the source's compressed caches, evaluated, costed and stored. Its key
holds what determines the answer, not the split that drew the source, so every cell, sweep and
later process that meets the source again reuses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvx.core.identity import CellIdentity
from kvx.core.records import Answer
from kvx.core.source import Source
from kvx.modeling.capture import Capture
from kvx.modeling.compressed import Caches
from kvx.modeling.costs import cache_cost, decode_cost
from kvx.modeling.generation import Generation
from kvx.modeling.reader import LoadedReader, Prompt
from kvx.pipeline.batched import DecodeJob
from kvx.pipeline.encode import prompt_hash
from kvx.pipeline.evaluate import evaluate
from kvx.stores.controls import ControlStore, answer_key, split_key
from kvx.tasks.base import Task


@dataclass
class Control:
    """One source's control on its way: its store key, and its answer once stored or decoded."""

    key: str
    answer: Answer | None
    #: the FullCache's bytes, counted on the capture before decoding appends to it
    cost: dict = field(default_factory=dict)


class Controls:
    """The control stage over one store and the process's captured prefills."""

    def __init__(self, store: ControlStore, caches: Caches) -> None:
        self.store, self.caches = store, caches

    def lookup(self, identity: CellIdentity, prompt: Prompt, source: Source) -> Control:
        """The source's control as stored (also under the split-based key an older kvx used), or
        one still to decode."""
        rendered, content = prompt_hash(prompt), source.digest()
        key = answer_key(identity, rendered, content)
        stored = self.store.find(key, split_key(identity, rendered, content))
        return Control(key, None if stored is None else Answer.from_dict(stored))

    def decode_job(self, control: Control, reader: LoadedReader, prompt: Prompt, budget: int) -> DecodeJob:
        """What decoding a missing control takes: a cache over the captured prefill's tensors."""
        capture = self.caches.capture(reader, prompt.context_ids)
        control.cost = _full_bytes(capture)
        return DecodeJob(capture.full_cache(), prompt.question_ids, capture.n_tokens, budget)

    def finish(self, control: Control, task: Task, gen: Generation, source: Source) -> Answer:
        """Evaluate a decoded control once and store it with its cost."""
        answer = evaluate(task, gen, source)
        answer.cost = {**control.cost, **decode_cost(gen)}
        self.store.put(control.key, answer.to_dict())
        control.answer = answer
        return answer

    def complete(self, control: Control, reader: LoadedReader, prompt: Prompt) -> None:
        """A stored control decoded before answers carried their cost gets its FullCache bytes from
        the capture in memory, if there is one (stored back; its timings stay unknown), so the cells
        reusing it still have a bytes ratio."""
        full = control.answer
        capture = self.caches.captured(reader, prompt.context_ids) if full and full.cost is None else None
        if full is not None and capture is not None:
            full.cost = _full_bytes(capture)
            self.store.put(control.key, full.to_dict(), computed=False)


def _full_bytes(capture: Capture) -> dict:
    """The FullCache's bytes: the cache over the whole captured prefill."""
    return cache_cost(capture.full_cache())
