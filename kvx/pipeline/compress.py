"""Compress stage: build a compressed cache from one captured prefill (or the compressor's hook).

Per source, the context is prefilled once per process and every fast-path compressor builds its
cache from that capture (``Caches.captures``); when sources share their context and the compressor
does not see the question (``query_aware=false``), the compressed cache itself is built once
(``Caches.shared``). What of the prompt goes through the compressor is the cell's ``query_aware``
mode (``kvx.core.query``).
"""

from __future__ import annotations

import torch
from transformers import Cache

from kvx.compressors.base import Compressor
from kvx.core.query import OFF, PROMPT, QUESTION
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
    query_aware: str,
    tracer: Tracer | None = None,
) -> tuple[Cache, CompressedRun]:
    """The compressed cache of one prompt, its retained-position map and where decoding starts.
    With ``query_aware=question`` the prompt is the joined one (``LoadedReader.render(joined=True)``)."""
    if prompt.joined != (query_aware == QUESTION):
        raise ValueError(f"query_aware={query_aware}: a joined prompt goes with query_aware=question only")
    prefill_ids, feed = prefill_and_feed(prompt, query_aware)
    digest = ids_digest(prefill_ids)  # keys both the captured prefill and the shared compressed context
    capture = None
    if compressor.fast_path:
        before = caches.prefills
        with (tracer or Tracer()).stage("prefill", {"tokens": int(prefill_ids.shape[1])}) as span:
            capture = caches.capture(reader, prefill_ids, digest)
            span.set_attribute("reused_capture", caches.prefills == before)
    # a press that compresses while decoding carries its prefill's state into the decode: never shared
    alone = query_aware != OFF or compressor.compresses_decoding
    shared = None if alone else (reader.key, digest, repr(compressor), ratio)
    run = CompressedRun(caches, reader, compressor, ratio, prefill_ids, feed, capture, shared)
    cache = run.build()
    if run.retained is None:
        run.retained = compressor.retained_map(reader.model, cache, capture, ratio)
    start = prefill_ids.shape[1]  # positions continue from the original prefill, as kvpress's do
    if compressor.decode_from_cache_length:
        start = cache.get_seq_length()
    run.start = start
    return cache, run


def prefill_and_feed(prompt: Prompt, query_aware: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The tokens prefilled through the compressor and those fed uncompressed when decoding starts:
    the context part and the question part, or with ``prompt`` every token but the last and the last
    (a ``joined`` prompt's context part already ends with the question)."""
    if query_aware == PROMPT:
        ids = torch.cat([prompt.context_ids, prompt.question_ids], dim=1)
        return ids[:, :-1], ids[:, -1:]
    return prompt.context_ids, prompt.question_ids


def compress_job(job: Job, caches: Caches, reader: LoadedReader) -> None:
    """The compress stage for one cell's source: its cache, run and cost (the cache as decoding will
    find it, and its build time) on the job; a failure makes the record an ``error``."""
    cell, setting = job.cell, job.setting
    n_compressed = int(prefill_and_feed(job.prompt, cell.query_aware)[0].shape[1])
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
