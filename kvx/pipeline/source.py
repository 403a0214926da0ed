"""One source through every stage, for every cell of a split that runs it.

This is the one path the CLI, the tests, the benchmarks and traced sources all take:
1. encode the source once;
2. per cell, transform it and resolve the setting (``open_job``);
3. look the FullCache control up;
4. compress each cell;
5. decode the control (unless stored) and every batchable cache in one batch;
6. close each record: evaluate, pair, diagnose.

Caches that carry model state (AdaKV's head masks, quantized caches) or need another attention
implementation decode alone after the batch. A traced source is this same path for one cell, its
stages reporting to that cell's tracer.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import torch

from kvx.core.query import QUESTION
from kvx.core.records import ERROR, SUPPORTED, UNSUPPORTED, Record
from kvx.core.setting import Setting
from kvx.core.source import Source
from kvx.modeling.compressed import Caches
from kvx.modeling.generation import Generation
from kvx.modeling.heap import default_budget, trim_memory
from kvx.modeling.layers import attention_layers, clear_head_masks
from kvx.modeling.reader import LoadedReader, Prompt
from kvx.pipeline.batched import SAME_ATTENTION, DecodeJob, batchable
from kvx.pipeline.cell import Job, Member, setting_dict
from kvx.pipeline.compress import compress_job, prefill_and_feed
from kvx.pipeline.control import Controls
from kvx.pipeline.decode import decode_batch, decode_compressed
from kvx.pipeline.diagnose import close
from kvx.pipeline.encode import encode, prompt_hash
from kvx.pipeline.transform import Transformed, fail_transform, transformed
from kvx.stores.artifacts import ArtifactStore
from kvx.stores.tracing import Tracer


@dataclass
class Stages:
    """What the stages reuse across sources and cells, handed in by the engine that owns it."""

    caches: Caches
    controls: Controls
    artifacts: ArtifactStore
    #: bytes a source may hold while decoding (capture, caches, decode buffers); 0: derived from the
    #: reader's device (``kvx.modeling.heap.default_budget``)
    budget: int = 0
    #: per cell id: how its compressed caches were decoded ("batched", "alone: <why>") -> count
    decodes: dict[str, Counter[str]] = field(default_factory=dict)

    def count(self, cell_id: str, how: str) -> None:
        self.decodes.setdefault(cell_id, Counter())[how] += 1


def run_source(
    stages: Stages,
    reader: LoadedReader,
    members: list[Member],
    source: Source,
    release: bool = False,
    keep_shared: bool = True,
) -> list[Record]:
    """Every member cell's record of one source. With ``release`` the capture leaves memory before
    decoding when nothing after needs it, and so do this source's shared compressed contexts unless
    ``keep_shared`` (a later source has the same context)."""
    started = time.perf_counter()
    tracer = members[0].tracer if len(members) == 1 else Tracer()  # only a lone cell is ever traced
    with reader.autocast(), stages.caches.holding(release):
        with tracer.stage("encode", {"context_chars": len(source.context)}) as span:
            prompt = encode(reader, source)
            span.set_outputs(
                {
                    "context_tokens": prompt.context_ids.shape[1],
                    "question_tokens": prompt.question_ids.shape[1],
                }
            )
        records: list[Record] = []
        jobs: list[Job] = []
        for member in members:
            record, job = open_job(stages.artifacts, member, reader, source, prompt)
            records.append(record)
            if job is not None:
                jobs.append(job)
        if jobs:
            for job in _control_and_batch(stages, jobs, reader, source, prompt, tracer, release, keep_shared):
                _alone(stages, job, reader)
    seconds = (time.perf_counter() - started) / len(records)
    for record in records:
        record.seconds = seconds  # the source's time, shared equally by its cells
    return records


def open_job(
    artifacts: ArtifactStore, member: Member, reader: LoadedReader, source: Source, prompt: Prompt
) -> tuple[Record, Job | None]:
    """The record of one source and cell, through the transform and the setting's resolution, with
    the job to compress, or None when the record is already final (unsupported, or an error)."""
    cell, identity, tracer = member.cell, member.plan.identity, member.tracer
    n_ctx = int(prompt.context_ids.shape[1])
    record = Record(
        key=member.plan.key(cell, source),
        status=SUPPORTED,
        reason="",
        source_id=source.id,
        references=list(source.answers),
        setting={},
        prompt_hash=prompt_hash(prompt),
        n_context_tokens=n_ctx,
        n_question_tokens=int(prompt.question_ids.shape[1]),
        **member.plan.base,
    )
    try:
        with tracer.stage("transform", {"transform": cell.transform_name}) as span:
            out = transformed(
                artifacts, cell.transform, cell.transform_name, identity.transform, reader, source
            )
            if out is not None:
                span.set_outputs({"context": out.source.context, **out.info})
    except Exception as exc:  # a transform that fails on a source: never a wrong answer
        asked = identity.setting
        record.setting = setting_dict(Setting(asked.value if asked.kind == "ratio" else 0.0, None), asked)
        fail_transform(record, cell.transform_name, exc)
        return record, None
    comp_source, comp_prompt = source, prompt
    if out is not None:
        comp_source, comp_prompt = out.source, encode(reader, out.source)
        record.transform = _transform_info(out, comp_prompt, n_ctx)
        record.compressed_text_sha256 = out.info["context_sha256"]
    if cell.query_aware == QUESTION:  # kvpress's query-aware input: the question joins the context
        comp_prompt = encode(reader, comp_source, joined=True)
    if reader.max_prompt_tokens is not None:  # what the limit cut, from the prompt each side read
        cut = {
            "max_prompt_tokens": reader.max_prompt_tokens,
            "mode": reader.truncation,
            "context_tokens_cut": prompt.truncated,
        }
        if comp_prompt is not prompt:
            cut["compressed_context_tokens_cut"] = comp_prompt.truncated
        record.truncation = cut
    n_compressed = int(comp_prompt.context_ids.shape[1])
    if identity.setting.kind == "budget_tokens":  # a budget counts every token the compressor sees
        n_compressed = int(prefill_and_feed(comp_prompt, cell.query_aware)[0].shape[1])
    setting = cell.compressor.resolve(identity.setting, n_compressed, reader.model)
    record.setting = setting_dict(setting, identity.setting)
    if not setting.supported:
        record.fail(UNSUPPORTED, setting.reason)
        return record, None
    return record, Job(cell, identity, record, setting, comp_source, comp_prompt, out, tracer)


def _control_and_batch(
    stages: Stages,
    jobs: list[Job],
    reader: LoadedReader,
    source: Source,
    prompt: Prompt,
    tracer: Tracer,
    release: bool,
    keep_shared: bool,
) -> list[Job]:
    """Compress the jobs that can join a batch, decode them with the control (unless stored) in
    batches and close them; return the jobs that must decode alone, each after the batches with the
    model state its compression set (AdaKV's head masks) put back.

    A batch is decoded as soon as the next cache would take what the source holds (its capture,
    the batch's caches and their decode buffers) past ``stages.budget``: one batch when it fits,
    several when not, each answer the same either way (``decode_batches`` in its cost says how
    many). Once every job is compressed and none runs diagnostics (which rebuild caches from the
    capture), ``release`` drops the capture before the last batch decodes, and the shared compressed
    contexts unless ``keep_shared``: that decode then holds the caches it reads and nothing else."""
    task, budget = jobs[0].cell.task, jobs[0].cell.max_new_tokens
    model = reader.model
    try:
        with tracer.stage("control", {"compressor": "FullCache"}) as span:
            control = stages.controls.lookup(jobs[0].identity, prompt, source)
            decoding = None if control.answer else stages.controls.decode_job(control, reader, prompt, budget)
            stored = decoding is None
            span.set_outputs({"stored": stored})
    except Exception as exc:  # no control, no pair: an error, not a wrong answer
        for job in jobs:
            job.record.fail(ERROR, f"FullCache control: {type(exc).__name__}: {exc}")
        return []
    limit = stages.budget or default_budget(reader.device)
    batches: list[list[Job]] = []
    together: list[Job] = []
    alone: list[Job] = []

    def held(extra: list[Job]) -> int:
        """Bytes the source would hold decoding ``together`` and ``extra``, the pending control included."""
        rows = [
            _row_bytes(j.cost["kv_bytes"], j.cache.get_seq_length(), j.run.feed, j.cell.max_new_tokens)
            for j in together + extra
        ]
        if decoding is not None:
            rows.append(_row_bytes(control.cost["kv_bytes"], decoding.start, decoding.feed, budget))
        capture = next((j.run.capture for j in together + extra if j.run.capture is not None), None)
        return sum(rows) + (capture.nbytes() if capture is not None else 0)

    def decode(batch: list[Job], last: bool) -> bool:
        """Decode one batch (the control with the first) and close its jobs; False when the control failed."""
        nonlocal decoding
        if stored and not batches:  # the compressions have captured the prefill, if any needs it
            stages.controls.complete(control, reader, prompt)
        if last and release and all(j.cache is not None and not j.cell.diagnostics for j in batch + alone):
            stages.caches.drop_held(shared=not keep_shared)
            for job in jobs:
                if job.run is not None:
                    job.run.capture = None
            trim_memory()  # the capture's pages, before the decode's buffers take new ones
        decodes = [decoding] if decoding is not None else []
        decodes += [DecodeJob(j.cache, j.run.feed, j.run.start, j.cell.max_new_tokens) for j in batch]
        with tracer.stage("decode", {"max_new_tokens": budget, "rows": len(decodes)}, "LLM") as span:
            gens = decode_batch(reader, decodes)
            span.set_outputs([_decoded(gen) for gen in gens])
        if decoding is not None:
            gen, decoding = gens.pop(0), None
            try:
                if isinstance(gen, Exception):
                    raise gen
                stages.controls.finish(control, task, gen, source)
            except Exception as exc:
                for job in jobs:
                    job.record.fail(ERROR, f"FullCache control: {type(exc).__name__}: {exc}")
                return False
        for job in jobs:
            job.record.full = control.answer
        for job, gen in zip(batch, gens):
            if isinstance(gen, Exception):
                job.record.fail(ERROR, f"{type(gen).__name__}: {gen}")
            else:
                job.run.first_logits = gen.first_logits
                close(job, reader, gen)
        batches.append(batch)
        return True

    for job in jobs:
        impl = job.cell.compressor.attn_implementation
        if impl not in SAME_ATTENTION:  # known before compressing: compressed when it decodes
            stages.count(job.identity.id, f"alone: attention {impl} decodes alone")
            alone.append(job)
            continue
        clear_head_masks(model)
        compress_job(job, stages.caches, reader)
        if release:  # the prefill's and the press's temporaries: pages back before the next
            trim_memory()
        if not job.ok:
            continue
        why = batchable(job.cache, job.run.decode_impl, model)
        if job.cell.compressor.compresses_decoding:
            why = "decoding-time compression decodes alone"
        stages.count(job.identity.id, f"alone: {why}" if why else "batched")
        if why is not None:
            job.masks = [getattr(m, "masked_key_indices", None) for m in attention_layers(model)]
            alone.append(job)
            continue
        if together and held([job]) > limit:  # the batch so far decodes now; this cache starts the next
            if not decode(together, last=False):
                return []
            together = []
        together.append(job)
    if not decode(together, last=True):
        return []
    for job in (j for batch in batches for j in batch):
        if job.record.compressed is not None and job.record.compressed.cost is not None:
            job.record.compressed.cost["decode_batches"] = len(batches)
    return [job for job in alone if job.ok]


def _row_bytes(kv_bytes: int, n_tokens: int, feed: torch.Tensor, max_new_tokens: int) -> int:
    """What one row of a batched decode holds: its cache, and the buffer the decode appends into,
    sized for the cache plus its feed and answer (``kvx.pipeline.batched``)."""
    per_token = kv_bytes / max(n_tokens, 1)
    return int(2 * kv_bytes + per_token * (int(feed.shape[1]) + max_new_tokens))


def _alone(stages: Stages, job: Job, reader: LoadedReader) -> None:
    """Decode one job by itself and close it, its compression's model state in place."""
    model = reader.model
    if job.cache is None:
        clear_head_masks(model)
        compress_job(job, stages.caches, reader)
    else:
        for module, mask in zip(attention_layers(model), job.masks or []):
            module.masked_key_indices = mask
    try:
        if job.ok:
            try:
                with job.tracer.stage("decode", {"max_new_tokens": job.cell.max_new_tokens}, "LLM") as span:
                    gen = decode_compressed(reader, job.run, job.cache, job.cell.max_new_tokens)
                    span.set_outputs(_decoded(gen))
            except Exception as exc:  # recorded, counted, never scored as wrong
                job.record.fail(ERROR, f"{type(exc).__name__}: {exc}")
                return
            close(job, reader, gen)
    finally:
        clear_head_masks(model)


def _decoded(gen: Generation | Exception) -> dict:
    """What a trace shows of one decoded answer."""
    if isinstance(gen, Exception):
        return {"error": f"{type(gen).__name__}: {gen}"}
    return {"text": gen.text, "new_tokens": len(gen.token_ids), "stop": gen.stop_reason}


def _transform_info(out: Transformed, prompt: Prompt, n_original: int) -> dict:
    """What the record says about a transform: hashes, kept segments, retained token share."""
    return {**out.info, "retained_token_share": int(prompt.context_ids.shape[1]) / n_original}
