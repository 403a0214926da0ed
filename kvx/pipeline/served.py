"""Cells answered by a served reader (``reader=openai``): the text-level path.

A served reader returns text for messages, so what it can measure is what happens to the text: a
transform, a turn selection, a RAG text compressor, a deletion, or ``press=none``. For each split
the sources are drawn once; per source and cell the transform runs through the artifact store (one
output per row, replayed to every reader), the FullCache control is looked up in the control store,
and the control and compressed prompts still missing become chat requests. Every request of the
split then goes out together (``ServedReader.chat``: concurrent, rate-limited, retried, through the
response cache), and each record is closed as the in-process path closes it: evaluated once by the
task, paired with its control, its transition set.

A KV press has no cache to compress here and a diagnostic no logits to read: the first is an
``unsupported`` record, the second a ``not_applicable`` result, each with its reason. A request
that still fails after its retries is an ``error`` record with the server's message; the rest of the
cell goes on, and a rerun asks only for what is missing.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from kvx.core.identity import digest
from kvx.core.records import ERROR, SUPPORTED, UNSUPPORTED, Answer, Record
from kvx.core.setting import Setting
from kvx.core.source import Source
from kvx.diagnostics.base import DiagnosticResult
from kvx.modeling.chat import ChatModel, ChatReply, ChatRequest
from kvx.modeling.generation import Generation
from kvx.modeling.reader import reader_identity
from kvx.pipeline.cell import Cell, Plan, setting_dict
from kvx.pipeline.evaluate import evaluate
from kvx.pipeline.transform import fail_transform, transformed
from kvx.stores.artifacts import ArtifactStore
from kvx.stores.controls import ControlStore, answer_key

#: how a served reader renders a prompt (the server applies its own chat template)
PROMPT_FORMAT = "chat:messages"


@dataclass
class ServedReader:
    """A served reader as the pipeline sees it: its identity, names, token counter and chat model."""

    name: str
    identity: dict[str, Any]
    label: str
    family: str
    revision: str
    chat: ChatModel
    count: Callable[[str], int]
    prompt_format: str = PROMPT_FORMAT
    max_prompt_tokens: int | None = None
    served: bool = field(default=True, init=False)

    @property
    def key(self) -> str:
        return digest(self.identity)

    def count_tokens(self, text: str) -> int:
        return self.count(text)


def connect(name: str, reader: Any, responses: Path) -> ServedReader:
    """A served reader's client, its response cache under ``responses``, and its identity (the
    server is asked what it serves, once per process)."""
    identity = reader_identity(name, reader)
    endpoint = reader.endpoint(responses)
    served = identity.get("served") or {}
    return ServedReader(
        name=name,
        identity=identity,
        label=reader.label(name),
        family=reader.family(name),
        revision=str(served.get("root") or served.get("id") or reader.model),
        chat=endpoint,
        count=endpoint.counter[1],
    )


def messages(source: Source) -> list[dict[str, str]]:
    """The source as chat messages: its system prompt, then one user message with the context, the
    question and the answer prefix (an endpoint cannot be made to start its reply with one), on a
    line of its own unless the source runs it on (``Source.inline_prefix``)."""
    user = source.context + source.question
    if source.answer_prefix:
        user += ("" if source.inline_prefix or user.endswith(("\n", " ")) else "\n") + source.answer_prefix
    out = [{"role": "system", "content": source.system}] if source.system else []
    return [*out, {"role": "user", "content": user}]


def messages_hash(request: ChatRequest) -> str:
    """The prompt hash of a served record: sha256 of the messages as sent."""
    return hashlib.sha256(json.dumps(request.messages, ensure_ascii=False).encode()).hexdigest()


@dataclass
class _Pending:
    """One record waiting for its replies: its control's store key and request, and the compressed
    side's request (None: the cell reports the control itself)."""

    cell: int
    record: Record
    source: Source  # what the compressed side read
    original: Source
    control: str
    control_request: str
    compressed: str | None


def run_served(
    cells: list[Cell],
    plans: list[Plan],
    sources: list[Source],
    reader: ServedReader,
    artifacts: ArtifactStore,
    controls: ControlStore,
    progress: bool = True,
) -> list[list[Record]]:
    """Every cell's records over one split's ``sources`` (the cells share the split)."""
    started = time.perf_counter()
    out: list[list[Record]] = [[] for _ in cells]
    requests: dict[str, ChatRequest] = {}
    stored: dict[str, Answer] = {}  # control key -> the stored control
    pending: list[_Pending] = []
    for i, cell in enumerate(cells):
        bound = _bind(cell, reader)
        for source in tqdm(sources, desc=f"{cell.label()}: prompts", disable=not progress, leave=False):
            record, item = _open(cell, plans[i], source, reader, artifacts, controls, bound, requests, stored)
            out[i].append(record)
            if item is not None:
                item.cell = i
                pending.append(item)
    label = cells[0].task_name if len(cells) == 1 else f"{cells[0].task_name}: {len(cells)} cells"
    keys = list(requests)
    replies = dict(
        zip(keys, reader.chat.complete([requests[k] for k in keys], desc=label, progress=progress))
    )
    finished: dict[str, Answer | Exception] = {}
    for item in pending:
        cell = cells[item.cell]
        full = stored.get(item.control) or finished.get(item.control)
        if full is None:
            full = _answer(cell, replies[item.control_request], item.original)
            if isinstance(full, Answer):
                controls.put(item.control, full.to_dict())
            finished[item.control] = full
        if isinstance(full, Exception):
            item.record.full = None
            item.record.fail(ERROR, f"FullCache control: {full}")
            continue
        item.record.full = full
        if item.compressed is None:  # nothing to compress: the cell reports the control itself
            item.record.pair(full, Answer.from_dict(full.to_dict()))
        else:
            answer = _answer(cell, replies[item.compressed], item.source)
            if isinstance(answer, Exception):
                item.record.fail(ERROR, str(answer))
                continue
            item.record.pair(full, answer)
        if cell.diagnostics:
            item.record.diagnostics = {name: _no_cache(reader) for name, _ in cell.diagnostics}
    seconds = (time.perf_counter() - started) / max(1, sum(len(r) for r in out))
    for records in out:
        for record in records:
            record.seconds = seconds
        _mark_fingerprints(records)
    return out


def _mark_fingerprints(records: list[Record]) -> None:
    """A hosted model can change under its name: when a cell's answers came from more than one system
    fingerprint, every answer of the cell lists them all (``served.cell_fingerprints``)."""
    answers = [a for r in records for a in (r.full, r.compressed) if a is not None and a.served]
    seen = sorted(
        {str(a.served["system_fingerprint"]) for a in answers if a.served.get("system_fingerprint")}
    )
    if len(seen) > 1:
        for answer in answers:
            answer.served = {**answer.served, "cell_fingerprints": seen}


def _bind(cell: Cell, reader: ServedReader) -> str | None:
    """Bind the cell's transform to the reader; why it cannot be, for one that reads the reader's model."""
    if cell.transform.uses_reader:
        return (
            f"transform {cell.transform_name} reads the reader's own model, and reader={reader.name} is "
            "served: give it a feature model of its own"
        )
    cell.transform.bind(reader)  # type: ignore[arg-type]
    return None


def _open(
    cell: Cell,
    plan: Plan,
    source: Source,
    reader: ServedReader,
    artifacts: ArtifactStore,
    controls: ControlStore,
    unbound: str | None,
    requests: dict[str, ChatRequest],
    stored: dict[str, Answer],
) -> tuple[Record, _Pending | None]:
    """One source's record under one cell, with the requests it waits for (None: already final)."""
    identity = plan.identity
    full_request = ChatRequest.of(messages(source), cell.max_new_tokens)
    prompt_hash = messages_hash(full_request)
    record = Record(
        key=plan.key(cell, source),
        status=SUPPORTED,
        reason="",
        source_id=source.id,
        references=list(source.answers),
        setting=setting_dict(Setting(0.0, 1.0), identity.setting),
        prompt_hash=prompt_hash,
        n_context_tokens=reader.count_tokens(source.context),
        n_question_tokens=reader.count_tokens(source.question + source.answer_prefix),
        **plan.base,
    )
    if not cell.compressor.keeps_everything:
        record.setting = setting_dict(Setting(float(cell.ratio), None), identity.setting)
        record.fail(
            UNSUPPORTED,
            f"reader={reader.name} answers through an endpoint: press {cell.press_name} compresses the "
            "KV cache, which only an in-process reader has (use press=none with a text transform)",
        )
        return record, None
    if unbound is not None:
        record.fail(UNSUPPORTED, unbound)
        return record, None
    control = answer_key(identity, prompt_hash, source.digest())
    if control not in stored:
        found = controls.find(control)
        if found is not None:
            stored[control] = Answer.from_dict(found)
        else:
            requests[prompt_hash] = full_request
    try:
        out = transformed(artifacts, cell.transform, cell.transform_name, identity.transform, reader, source)  # type: ignore[arg-type]
    except Exception as exc:  # a transform that fails on a source: never a wrong answer
        fail_transform(record, cell.transform_name, exc)
        return record, None
    if out is None:
        return record, _Pending(0, record, source, source, control, prompt_hash, None)
    request = ChatRequest.of(messages(out.source), cell.max_new_tokens)
    n_kept = reader.count_tokens(out.source.context)
    record.transform = {**out.info, "retained_token_share": n_kept / max(1, record.n_context_tokens or 0)}
    record.compressed_text_sha256 = out.info["context_sha256"]
    key = messages_hash(request)  # one request per distinct prompt, whichever side asks
    requests[key] = request
    return record, _Pending(0, record, out.source, source, control, prompt_hash, key)


def _answer(cell: Cell, reply: ChatReply | Exception, source: Source) -> Answer | Exception:
    """A reply evaluated once by the task, with what the server said; an exception stays one."""
    if isinstance(reply, Exception):
        return reply
    try:
        answer = evaluate(cell.task, Generation([], reply.text, reply.stop_reason), source)
    except Exception as exc:  # recorded, counted, never scored as wrong
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    answer.token_ids = None  # an endpoint returns text, not token ids
    answer.served = dict(reply.served)
    return answer


def _no_cache(reader: ServedReader) -> dict[str, Any]:
    result = DiagnosticResult(
        "not_applicable",
        reason=f"reader={reader.name} answers through an endpoint: there is no cache or logits to diagnose",
    )
    return asdict(result)
