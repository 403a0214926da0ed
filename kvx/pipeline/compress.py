"""Compress stage: build a compressed cache from one captured prefill (or the compressor's hook).

Per source, the context is prefilled once per process and every fast-path compressor builds its
cache from that capture (``Caches.captures``); when sources share their context and the compressor
does not see the question, the compressed cache itself is built once (``Caches.shared``).
"""

from __future__ import annotations

import torch
from transformers import Cache

from kvx.compressors.base import Compressor
from kvx.core.records import ERROR
from kvx.modeling.capture import ids_digest
from kvx.modeling.compressed import Caches, CompressedRun
from kvx.modeling.costs import cache_cost
from kvx.modeling.reader import LoadedReader, Prompt
from kvx.pipeline.cell import Job
from kvx.stores.tracing import Tracer


def compress(
    caches: Caches,
    reader: LoadedReader,
    compressor: Compressor,
    ratio: float,
    prompt: Prompt,
    query_aware: bool,
    tracer: Tracer | None = None,
) -> tuple[Cache, CompressedRun]:
    """The compressed cache of one prompt, its retained-position map and where decoding starts."""
    model = reader.model
    n_ctx = prompt.context_ids.shape[1]
    if query_aware:  # the question (all but its last token) goes through the compressor
        prefill_ids = torch.cat([prompt.context_ids, prompt.question_ids[:, :-1]], dim=1)
        feed = prompt.question_ids[:, -1:]
    else:
        prefill_ids, feed = prompt.context_ids, prompt.question_ids
    digest = ids_digest(prefill_ids)  # keys both the captured prefill and the shared compressed context
    capture = None
    if compressor.fast_path:
        before = caches.prefills
        with (tracer or Tracer()).stage("prefill", {"tokens": int(prefill_ids.shape[1])}) as span:
            capture = caches.capture(reader, prefill_ids, digest)
            span.set_attribute("reused_capture", caches.prefills == before)
    shared = None if query_aware else (reader.key, digest, repr(compressor), ratio)
    run = CompressedRun(caches, reader, compressor, ratio, prefill_ids, feed, capture, shared)
    cache = run.build()
    if run.retained is None:
        run.retained = compressor.retained_map(model, cache, capture, ratio)
    start = prefill_ids.shape[1] if query_aware else n_ctx
    if compressor.decode_from_cache_length:
        start = cache.get_seq_length()
    run.start = start
    return cache, run


def compress_job(job: Job, caches: Caches, reader: LoadedReader) -> None:
    """The compress stage for one cell's source: its cache, run and cost (the cache as decoding will
    find it, and its build time) on the job; a failure makes the record an ``error``."""
    cell, setting = job.cell, job.setting
    n_compressed = int(job.prompt.context_ids.shape[1])
    try:
        inputs = {"compressor": cell.press_name, "ratio": setting.ratio, "tokens": n_compressed}
        with job.tracer.stage("compress", inputs) as span:
            job.cache, job.run = compress(
                caches, reader, cell.compressor, setting.ratio, job.prompt, cell.query_aware, job.tracer
            )
            capture = job.run.capture
            job.cost = {
                **cache_cost(job.cache, reader.model),
                "compress_s": round(job.run.seconds, 4),
                "prefill_s": None if capture is None else round(capture.seconds, 4),
            }
            span.set_outputs(
                {"cache_tokens": job.cache.get_seq_length(), "retained_share": setting.retained_share}
            )
    except Exception as exc:  # recorded, counted, never scored as wrong
        job.record.fail(ERROR, f"{type(exc).__name__}: {exc}")
