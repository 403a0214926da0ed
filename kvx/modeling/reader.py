"""A loaded reader (model, tokenizer, identity) and the prompt it renders from a source.

Every stage and several plugin kinds (transforms that use the reader, diagnostics) work on a
loaded reader; reader plugins only build one (``kvx.readers.base``)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kvx.core.errors import ConfigError
from kvx.core.identity import digest, fields_of
from kvx.core.registry import canonical

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from kvx.core.source import Source


@dataclass
class Prompt:
    """Token ids exactly as kvpress's pipeline builds them: context part, then question part."""

    context_ids: torch.Tensor  # (1, n_context)
    question_ids: torch.Tensor  # (1, n_question), question + template suffix + answer prefix
    context_text: str = ""  # the templated text context_ids encode
    context_offset: int = 0  # where the source's context starts inside context_text
    #: per segment of the source, the [start, end) token positions of context_ids it occupies
    #: (None: the tokenizer gives no character offsets)
    segment_spans: list[tuple[int, int]] | None = None
    #: context tokens cut to fit ``max_prompt_tokens`` (``context_text`` is then the text before the cut)
    truncated: int = 0
    #: kvpress's query-aware input (``query_aware=question``): the question ends the context part, and
    #: the question part is only the template's suffix and the answer prefix
    joined: bool = False


#: what ``max_prompt_tokens`` cuts: ``left`` (``truncate_left``) or ``context`` (``truncate_context``)
TRUNCATIONS = ("left", "context")


def token_count(tokenizer: PreTrainedTokenizerBase, text: str) -> int:
    """How many tokens ``text`` takes, as every stage counts them (``LoadedReader.count_tokens``, what
    tasks size prompts with): a reader's ``token_counter()`` hook built on its tokenizer alone counts
    with this too, so a check made before the weights load finds the run's own numbers."""
    return len(tokenizer.encode(text, add_special_tokens=False))


@dataclass
class LoadedReader:
    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    revision: str
    fabric: Any
    #: the reader part of the cell identity (canonical name, fields, resolved weights)
    identity: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: the reader as records and tables name it (``hf:<model id>``, ``smollm2``)
    label: str = ""
    #: the model family the audit's family-by-row bootstrap resamples (``qwen``, ``gemma``)
    family: str = ""
    #: ``reader.max_prompt_tokens``: render() cuts the context past it (None: never)
    max_prompt_tokens: int | None = None
    #: ``reader.truncation``: how render() cuts, one of ``TRUNCATIONS``
    truncation: str = "left"

    def __post_init__(self) -> None:
        # a reader built by hand (tests, scripts) is identified by its name and revision
        self.identity = self.identity or {"name": self.name, "fields": {}, "revision": self.revision}
        self.label = self.label or self.name
        self.family = self.family or self.label

    @property
    def prompt_format(self) -> str:
        """How prompts are rendered: the tokenizer's chat template (by hash) or plain text."""
        template = self.tokenizer.chat_template
        if template is None:
            return "plain"
        text = template if isinstance(template, str) else json.dumps(template, sort_keys=True)
        return f"chat_template:{hashlib.sha256(text.encode()).hexdigest()[:12]}"

    @functools.cached_property
    def key(self) -> str:
        """Identity of the loaded weights and tokenizer: keys captured prefills and memos."""
        return digest(self.identity) if self.identity else self.name

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def autocast(self) -> contextlib.AbstractContextManager:
        return self.fabric.autocast() if self.fabric is not None else contextlib.nullcontext()

    def count_tokens(self, text: str) -> int:
        return token_count(self.tokenizer, text)

    def encode(
        self,
        context: str,
        question: str,
        answer_prefix: str = "",
        system: str = "",
        inline_prefix: bool = False,
    ) -> Prompt:
        """Apply the chat template the way kvpress's ``preprocess`` does, so answers match it; a
        system prompt is the template's system message (plain text before the context without one).
        ``inline_prefix``: a plain-text prompt runs the answer prefix on from the question
        (``Source.inline_prefix``), as RULER's own prompts do, instead of starting a line."""
        tok = self.tokenizer
        source_context = context
        if tok.chat_template is None:
            context = (tok.bos_token or "") + (f"{system}\n\n" if system else "") + context
            suffix = "" if inline_prefix else "\n"
        else:
            separator = "#" * (len(context) + 10)
            messages = [{"role": "system", "content": system}] if system else []
            templated = tok.apply_chat_template(
                [*messages, {"role": "user", "content": context + separator}],
                add_generation_prompt=True,
                tokenize=False,
            )
            context, suffix = templated.split(separator)
        ctx = tok.encode(context, return_tensors="pt", add_special_tokens=False)
        q = tok.encode(question + suffix + answer_prefix, return_tensors="pt", add_special_tokens=False)
        offset = len(context) - len(source_context)
        return Prompt(ctx.to(self.device), q.to(self.device), context, offset)

    def render(self, source: Source, joined: bool = False) -> Prompt:
        """The encode stage: the source's segments as one prompt, with each segment's token span,
        cut to ``max_prompt_tokens`` when set. ``joined``: kvpress's query-aware input, the question
        appended to the context text (``query_aware=question``), its question part empty."""
        context, question = (
            (source.context + source.question, "") if joined else (source.context, source.question)
        )
        prompt = self.encode(context, question, source.answer_prefix, source.system, source.inline_prefix)
        prompt.joined = joined
        if getattr(self.tokenizer, "is_fast", False):
            enc = self.tokenizer(prompt.context_text, add_special_tokens=False, return_offsets_mapping=True)
            if enc["input_ids"] == prompt.context_ids[0].tolist():
                prompt.segment_spans = token_spans(enc["offset_mapping"], source, prompt.context_offset)
        if self.max_prompt_tokens is not None and self.truncation == "context":
            truncate_context(prompt, self.max_prompt_tokens)
        elif self.max_prompt_tokens is not None:
            truncate_left(prompt, self.max_prompt_tokens, self.tokenizer, source.id)
        return prompt


def truncate_context(prompt: Prompt, limit: int) -> None:
    """Keep the context part's first ``limit`` tokens, as kvpress's pipeline does with
    ``max_context_length`` (``preprocess``): the template's opening and the start of the context stay,
    the end goes (the question first, in a ``joined`` prompt); the question part is never cut, nor
    counted in ``limit``."""
    over = int(prompt.context_ids.shape[1]) - limit
    if over <= 0:
        return
    prompt.context_ids = prompt.context_ids[:, :limit]
    prompt.truncated = over
    if prompt.segment_spans is not None:
        prompt.segment_spans = [_clip(span, limit) for span in prompt.segment_spans]


def truncate_left(prompt: Prompt, limit: int, tokenizer: PreTrainedTokenizerBase, source_id: str) -> None:
    """Cut the source context's first tokens until the prompt takes at most ``limit`` tokens.

    What stays whole: the template's opening (BOS, system message, user header: the tokens of
    ``context_text`` before ``context_offset``) and the question part (question, template suffix,
    answer prefix). The paper's readers cut the whole templated prompt from the left
    (``truncation_side='left'``), opening included; kvx keeps the opening so the reader still sees
    its instructions. A prompt whose kept parts alone exceed ``limit`` is a configuration error."""
    import torch

    ids = prompt.context_ids[0].tolist()
    n_question = int(prompt.question_ids.shape[1])
    over = len(ids) + n_question - limit
    if over <= 0:
        return
    opening = tokenizer.encode(prompt.context_text[: prompt.context_offset], add_special_tokens=False)
    head = next((i for i, (a, b) in enumerate(zip(opening, ids)) if a != b), min(len(opening), len(ids)))
    if over >= len(ids) - head:
        raise ConfigError(
            f"reader.max_prompt_tokens={limit} is too small for source {source_id}: the template's "
            f"opening ({head} tokens) and the question with its closing ({n_question} tokens) alone take "
            f"{head + n_question}, leaving no context token; raise it or set it to null"
        )
    ctx = prompt.context_ids
    prompt.context_ids = torch.cat([ctx[:, :head], ctx[:, head + over :]], dim=1)
    prompt.truncated = over
    if prompt.segment_spans is not None:
        prompt.segment_spans = [_shift(span, head, over) for span in prompt.segment_spans]


def _clip(span: tuple[int, int], limit: int) -> tuple[int, int]:
    """A segment's token span after every token from ``limit`` on is removed ((0, 0) when all were)."""
    lo, hi = (min(p, limit) for p in span)
    return (lo, hi) if hi > lo else (0, 0)


def _shift(span: tuple[int, int], head: int, cut: int) -> tuple[int, int]:
    """A segment's token span after ``cut`` tokens at ``head`` are removed ((0, 0) when all were)."""
    lo, hi = (p if p <= head else max(head, p - cut) for p in span)
    return (lo, hi) if hi > lo else (0, 0)


def token_spans(offsets: list[tuple[int, int]], source: Source, shift: int) -> list[tuple[int, int]]:
    """[start, end) token positions overlapping each segment's characters (empty: (start, start))."""
    out = []
    for lo, hi in source.segment_spans():
        lo, hi = lo + shift, hi + shift
        inside = [i for i, (a, b) in enumerate(offsets) if a < hi and b > lo and b > a]
        out.append((inside[0], inside[-1] + 1) if inside else (0, 0))
    return out


@contextlib.contextmanager
def attn_implementation(model: PreTrainedModel, name: str | None) -> Iterator[None]:
    """Switch the attention implementation for one compressor and switch back afterwards."""
    previous = model.config._attn_implementation
    if name is None or name == previous:
        yield
        return
    model.set_attn_implementation(name)
    try:
        yield
    finally:
        model.set_attn_implementation(previous)


class Reader(Protocol):
    """What loading asks of a configured reader (``kvx.readers.base.Reader`` is one): a dataclass
    whose fields and fingerprint identify it.

    Optional hook, looked up with ``getattr``: ``token_counter() -> Callable[[str], int] | None``,
    the run's own token count (``LoadedReader.count_tokens``; a served reader's sizing counter)
    built without loading any weights, so checks that need only the tokenizer
    (``kvx.pipeline.fit.check_fits``) run before a model loads; None or absent: not known before."""

    accelerator: str
    precision: str

    def load_model(self) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, str]: ...

    def fingerprint(self) -> dict[str, str]: ...

    def label(self, name: str) -> str: ...

    def family(self, name: str) -> str: ...


_IDENTITIES: dict[str, dict[str, Any]] = {}


def _config_key(name: str, reader: Reader, weights: bool = False) -> str:
    """A reader as configured (name and every field): keys the per-process identity cache; with
    ``weights``, only what the loaded model depends on (the model cache: a prompt limit is not)."""
    fields = dataclasses.asdict(reader)  # type: ignore[call-overload]
    if weights:
        fields.pop("max_prompt_tokens", None)
        fields.pop("truncation", None)
    return f"{name}:{sorted(fields.items())}"


def reader_identity(name: str, reader: Reader) -> dict[str, Any]:
    """The reader part of a cell's identity: canonical name, fields and fingerprint (once per process).

    A field the fingerprint resolves (``revision="main"`` -> its commit) is replaced by the resolved
    value, so a branch and the commit it points to are one reader."""
    key = _config_key(name, reader)
    if key not in _IDENTITIES:
        resolved = reader.fingerprint()
        fields = {k: v for k, v in fields_of(reader).items() if k not in resolved}
        _IDENTITIES[key] = {"name": canonical("reader", name), "fields": fields, **resolved}
    return _IDENTITIES[key]


def make_fabric(accelerator: str, precision: str) -> Any:
    from lightning.fabric import Fabric

    return Fabric(accelerator=accelerator, devices=1, precision=precision)


def fabric_is_a_no_op(accelerator: str, precision: str) -> bool:
    """Whether Fabric would only wrap the module: on the CPU in 32-true it converts nothing (its
    ``Precision()`` plugin), moves to the CPU, and its ``autocast()`` is a null context. Importing
    Lightning costs ~2 s, so that case skips it. ``LT_*`` environment variables (Lightning's CLI
    overrides of these arguments) keep Fabric, which reads them."""
    lightning_env = any(key.startswith("LT_") for key in os.environ)
    return accelerator == "cpu" and precision == "32-true" and not lightning_env


_LOADED: dict[str, LoadedReader] = {}


def load_reader(name: str, reader: Reader) -> LoadedReader:
    """Load a reader once per process: every cell of a sweep reuses the same model (a sweep over
    ``max_prompt_tokens`` or ``truncation`` too: each value is the same weights under its own identity)."""
    key = _config_key(name, reader, weights=True)
    if key not in _LOADED:
        _LOADED.clear()  # one model per process: a new reader replaces the old one
        _LOADED[key] = build_reader(name, reader)
    loaded = _LOADED[key]
    identity = reader_identity(name, reader)
    if loaded.identity == identity:
        return loaded
    limit, cut = getattr(reader, "max_prompt_tokens", None), getattr(reader, "truncation", "left")
    return dataclasses.replace(loaded, identity=identity, max_prompt_tokens=limit, truncation=cut)


def build_reader(name: str, reader: Reader) -> LoadedReader:
    """Load a reader's weights onto its accelerator, outside the process's one-reader cache (a
    compressor reader that must sit beside the panel's reader uses this directly)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # weight-loading bars would drown the sweep's own
    model, tokenizer, revision = reader.load_model()
    if fabric_is_a_no_op(reader.accelerator, reader.precision):
        fabric = None  # LoadedReader.autocast() is then a null context, as Fabric's would be
        model = model.to("cpu")  # all that setup_module would do
    else:
        fabric = make_fabric(reader.accelerator, reader.precision)
        model = fabric.setup_module(model).module  # moves and converts in place
    model.eval()
    identity = reader_identity(name, reader)
    label = reader.label(name)
    limit, cut = getattr(reader, "max_prompt_tokens", None), getattr(reader, "truncation", "left")
    return LoadedReader(
        name, model, tokenizer, revision, fabric, identity, label, reader.family(name), limit, cut
    )
