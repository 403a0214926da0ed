"""The judge stage: a judge's decision on both answers of every supported record, beside the task's score.

A cell names its judge (``judge=<name>``); after its records come back, each supported record's
FullCache control and compressed answer get ``Answer.judgments[name]``. Unsupported and error records
are left as they are (nothing was answered to judge). Identical requests (the same control judged in
every cell of a split, two answers with the same text) are asked once, all in one ``chat.complete``
call; a request that fails is an ``error`` judgment with the message and a source the judge does not
apply to is ``not_applicable`` with the reason, neither ever scored.

The judge's model comes from the reader registry: a served reader (``served = True``, e.g.
``reader=openai``) answers through its endpoint, with replies cached under ``<outputs_dir>/responses``
(a rerun pays for nothing twice); any other reader is loaded in-process beside the cell's reader and
answers greedily (``LocalChat``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from kvx.core.identity import digest
from kvx.core.records import SUPPORTED, Answer, Record, metric_key
from kvx.core.source import Source
from kvx.judges.base import UNCERTAIN, Judge, Judgment
from kvx.modeling.chat import ChatModel, ChatRequest, LocalChat
from kvx.modeling.reader import build_reader, reader_identity

#: the judge model this process holds (one at a time: a judge model can be as large as the reader)
_MODELS: dict[str, ChatModel] = {}


def judge_model(judge: Judge, outputs_dir: Path) -> tuple[ChatModel | None, dict[str, Any] | None]:
    """The judge's chat model and its identity (None, None for a rule judge). A served reader's fields
    are validated and its endpoint built; another reader is loaded once per process."""
    if not judge.uses_model:
        return None, None
    config = judge.model_config()  # type: ignore[attr-defined]
    identity = reader_identity(judge.reader, config)
    if getattr(type(config), "served", False):
        return config.endpoint(outputs_dir / "responses"), identity
    key = digest(identity)
    if key not in _MODELS:
        _MODELS.clear()
        _MODELS[key] = LocalChat(build_reader(judge.reader, config))
    return _MODELS[key], identity


def judge_records(
    records: list[Record],
    sources_by_id: dict[str, Source],
    name: str,
    judge: Judge,
    chat: ChatModel | None,
    progress: bool = True,
    model: dict[str, Any] | None = None,
) -> None:
    """Fill ``Answer.judgments[name]`` on both answers of each supported record. ``model``: the judge
    model's identity as judgments record it (default: ``chat.identity``)."""
    answers: list[Answer] = []
    items: list[tuple[Source, str]] = []
    for record in records:
        if record.status != SUPPORTED:
            continue
        source = sources_by_id.get(record.source_id)
        for answer in (record.full, record.compressed):
            if answer is None:
                continue
            if source is None:
                missing = Judgment.failed(f"source {record.source_id} is not in the cell's split")
                _put(
                    answer, name, dataclasses.replace(missing, judge={"name": name, "version": judge.version})
                )
                continue
            answers.append(answer)
            items.append((source, judge.candidate(answer)))
    for answer, judgment in zip(answers, judge_texts(items, name, judge, chat, progress, model), strict=True):
        _put(answer, name, judgment)


def judge_texts(
    items: list[tuple[Source, str]],
    name: str,
    judge: Judge,
    chat: ChatModel | None,
    progress: bool = True,
    model: dict[str, Any] | None = None,
) -> list[Judgment]:
    """The judgment of each (source, text the judge reads), in order, each with the judge's identity:
    ``not_applicable`` where the judge does not apply, a rule judge's decision, or the model's (identical
    requests asked once, all in one ``chat.complete`` call). Judge validation calls it directly on
    human-rated pairs (``kvx.aggregate.tpbench.judge_validation``)."""
    if model is None and chat is not None:
        model = chat.identity
    out: list[Judgment] = []
    waiting: dict[ChatRequest, list[int]] = {}
    for index, (source, text) in enumerate(items):
        identity = judge.describe(name, source, model)
        why = judge.applies(source)
        if why is not None:
            judgment = Judgment.not_applicable(why)
        elif not judge.uses_model:
            judgment = _safely(judge.decide, source, text)
        else:
            try:
                request = judge.request(source, text)  # type: ignore[attr-defined]
            except Exception as exc:  # a plugin's bug on one source: recorded, the others go on
                judgment = Judgment.failed(f"building the request: {_message(exc)}")
            else:
                waiting.setdefault(request, []).append(index)
                judgment = Judgment.failed("not asked")  # replaced by the reply below
        out.append(dataclasses.replace(judgment, judge=identity))
    if not waiting:
        return out
    if chat is None:
        raise ValueError(f"judge {name} asks a model but none was given")
    requests = list(waiting)
    replies = chat.complete(requests, desc=f"judge {name}", progress=progress)
    for request, reply in zip(requests, replies, strict=True):
        if isinstance(reply, Exception):
            judgment, served = Judgment.failed(_message(reply)), None
        else:
            judgment = _safely(judge.parse, reply.text)  # type: ignore[attr-defined]
            served = dict(reply.served) if "endpoint" in reply.served else None  # an endpoint's facts
        for index in waiting[request]:
            out[index] = dataclasses.replace(judgment, served=served, judge=out[index].judge)
    return out


def _safely(decide: Any, *args: Any) -> Judgment:
    try:
        return decide(*args)
    except Exception as exc:  # a plugin's bug on one answer: an error judgment, never a score
        return Judgment.failed(f"the judge failed: {_message(exc)}")


def _message(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


def _put(answer: Answer, name: str, judgment: Judgment) -> None:
    answer.judgments = {**(answer.judgments or {}), name: judgment.to_dict()}


def judge_cells(
    jobs: list[tuple[str, Judge, list[Record]]], sources: list[Source], outputs_dir: Path, progress: bool
) -> None:
    """Judge the records of the cells of one split, each judge once over every cell that names it (a
    control the cells share is one request); ``jobs``: (judge name, judge, the cell's records)."""
    grouped: dict[str, tuple[str, Judge, list[Record]]] = {}
    for name, judge, records in jobs:
        grouped.setdefault(judge.label(name), (name, judge, []))[2].extend(records)
    by_id = {s.id: s for s in sources}
    for name, judge, records in grouped.values():
        chat, model = judge_model(judge, outputs_dir)
        judge_records(records, by_id, name, judge, chat, progress, model)


def judge_metrics(rows: list[dict[str, Any]], name: str) -> dict[str, float]:
    """A cell's judged scores: per side (``judge.`` the compressed answers, ``full_judge.`` the controls)
    the accuracy over judged answers (uncertain ones included, with no credit) and the counts of
    judged, uncertain, error and not-applicable judgments; nothing when no answer was judged by it."""
    out: dict[str, float] = {}
    key = metric_key(name)
    for side, prefix in (("compressed", "judge."), ("full", "full_judge.")):
        found = [
            r[side]["judgments"][name]
            for r in rows
            if r["status"] == SUPPORTED and r.get(side) and name in (r[side].get("judgments") or {})
        ]
        if not found:
            continue
        judged = [j for j in found if j["status"] == "judged"]
        stem = f"{prefix}{key}."
        out[f"{stem}n_judged"] = len(judged)
        out[f"{stem}n_uncertain"] = sum(j.get("verdict") == UNCERTAIN for j in judged)
        out[f"{stem}n_error"] = sum(j["status"] == "error" for j in found)
        out[f"{stem}n_not_applicable"] = sum(j["status"] == "not_applicable" for j in found)
        if judged:
            out[f"{stem}accuracy"] = sum(bool(j["correct"]) for j in judged) / len(judged)
    return out
