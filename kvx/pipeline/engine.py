"""The run engine: one cell = task split x reader x transform x compressor x setting x seed.

It composes the stages for each source — transform, encode, compress, decode, evaluate,
diagnose — and owns what they reuse across cells: the FullCache control store (one control per
source, reused by every cell and later processes), captured prefills, shared compressed contexts
and FullCache-side memos. Failures on one source become an ``error`` record; settings a
compressor cannot honour become ``unsupported`` records. Neither is ever scored.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import Cache

from kvx.compressors.base import Compressor
from kvx.core.errors import ConfigError, Unsupported
from kvx.core.identity import CellIdentity, SettingSpec, component, fields_of
from kvx.core.lru import ByteLRU
from kvx.core.records import Answer, Record, validate
from kvx.core.setting import Setting
from kvx.core.source import Segment, Source
from kvx.diagnostics.base import Diagnostic
from kvx.diagnostics.context import DiagnosticContext
from kvx.modeling import attention
from kvx.modeling.capture import CaptureCache
from kvx.modeling.compressed import Caches, CompressedRun
from kvx.modeling.costs import cache_cost, decode_cost
from kvx.modeling.generation import Generation, greedy_decode
from kvx.modeling.heap import trim_memory
from kvx.modeling.layers import attention_layers, clear_head_masks
from kvx.modeling.reader import LoadedReader, Prompt
from kvx.pipeline.batched import SAME_ATTENTION, DecodeJob, batchable, greedy_decode_batch
from kvx.pipeline.compress import compress
from kvx.pipeline.decode import decode_compressed, decode_control
from kvx.pipeline.diagnose import diagnose
from kvx.pipeline.encode import encode, prompt_hash
from kvx.pipeline.evaluate import evaluate
from kvx.pipeline.transform import Transformed, transform_source
from kvx.stores.controls import ControlStore, answer_key, control_key, split_key
from kvx.stores.spool import Spool
from kvx.stores.tracing import Tracer, sampled
from kvx.tasks.base import Task
from kvx.transforms.base import Transform
from kvx.transforms.none import Identity


@dataclass
class Cell:
    """One cell's resolved settings. Names are canonical registry names (``kvx.core.registry.canonical``)."""

    task_name: str
    task: Task
    reader_name: str
    press_name: str
    compressor: Compressor
    ratio: float
    seed: int
    n_sources: int
    context_tokens: int
    max_new_tokens: int
    query_aware: bool = False
    #: (name, diagnostic) in run order; likelihood before decoding, which reads its gold ranks
    diagnostics: list[tuple[str, Diagnostic]] = field(default_factory=list)
    #: keep this many context tokens instead of removing ``ratio`` of them
    budget_tokens: int | None = None
    transform_name: str = "none"
    transform: Transform = field(default_factory=Identity)

    def spec(self) -> SettingSpec:
        return self.compressor.setting_spec(self.ratio, self.budget_tokens)

    def label(self) -> str:
        """How logs and run names show the cell: ``snapkv@0.5``, ``turns:recency[fraction=0.3]+none@-``."""
        compressor = f"{self.press_name}@{self.spec().label()}"
        if self.transform.identity:
            return compressor
        shown = ",".join(f"{k}={v}" for k, v in fields_of(self.transform).items() if k != "options")
        return f"{self.transform_name}[{shown}]+{compressor}"

    def identity(self, reader: dict) -> CellIdentity:
        """This cell's identity on a reader (``LoadedReader.identity`` or ``reader_identity``)."""
        return CellIdentity(
            task=component(self.task_name, self.task, scorer_version=type(self.task).scorer_version),
            reader=reader,
            transform=component(self.transform_name, self.transform),
            compressor=component(self.press_name, self.compressor),
            setting=self.spec(),
            seed=self.seed,
            n_sources=self.n_sources,
            context_tokens=self.context_tokens,
            max_new_tokens=self.max_new_tokens,
            query_aware=self.query_aware,
        )


def versions() -> dict[str, str]:
    return {d: version(d) for d in ("kvx", "torch", "transformers", "kvpress")}


class Engine:
    """Process-wide state shared by every cell a process runs."""

    def __init__(self, outputs_dir: Path, capture_cache_bytes: int, memo_bytes: int = 2**30) -> None:
        attention.register()
        self.controls = ControlStore(outputs_dir / "controls")
        self.partial = outputs_dir / "partial"  # spooled records of cells in progress (kvx.stores.spool)
        self.resumed: Counter[str] = Counter()  # per cell id: records reused from its spool
        #: text-transform outputs, content-addressed: computed once per (row, transform config)
        self.artifacts = ControlStore(outputs_dir / "artifacts")
        self.caches = Caches(CaptureCache(capture_cache_bytes), ByteLRU(memo_bytes))
        self._splits: dict[str, list[Source]] = {}
        #: per cell id: how its compressed caches were decoded ("batched", "alone: <why>") -> count
        self.decodes: dict[str, Counter[str]] = {}

    def _count(self, cell_id: str, how: str) -> None:
        self.decodes.setdefault(cell_id, Counter())[how] += 1

    @property
    def prefills(self) -> int:
        return self.caches.prefills

    @property
    def compressions(self) -> int:
        return self.caches.compressions

    @property
    def shared_contexts(self) -> dict:
        return self.caches.shared

    def sources(self, cell: Cell, reader: LoadedReader) -> list[Source]:
        key = cell.identity(reader.identity).split_cache_key
        if key not in self._splits:
            try:
                split = cell.task.sources(cell.n_sources, cell.seed, cell.context_tokens, reader.count_tokens)
            except ValueError as exc:  # e.g. context_tokens too small for the task: the user's to fix
                raise ConfigError(f"task={cell.task_name}: {exc}") from exc
            self._splits[key] = split
        return self._splits[key]

    def control(
        self, cell: Cell, reader: LoadedReader, source: Source, prompt: Prompt, identity: CellIdentity
    ) -> Answer:
        """The FullCache answer of one source: from the store, or decoded once and stored."""
        key, stored = self._stored_control(identity, prompt, source)
        if stored is not None:
            return self._with_bytes(key, stored, reader, prompt)
        capture = self.caches.capture(reader, prompt.context_ids)
        gen = decode_control(reader, capture, prompt, cell.max_new_tokens)
        answer = evaluate(cell.task, gen, source)
        answer.cost = {**cache_cost(capture.full_cache()), **decode_cost(gen)}
        self.controls.put(key, answer.to_dict())
        return answer

    def _with_bytes(self, key: str, full: Answer, reader: LoadedReader, prompt: Prompt) -> Answer:
        """A stored control decoded before answers carried their cost gets its FullCache bytes from
        the capture in memory, if there is one (stored back; its timings stay unknown), so the
        cells reusing it still have a bytes ratio."""
        capture = self.caches.captured(reader, prompt.context_ids) if full.cost is None else None
        if capture is not None:
            full.cost = cache_cost(capture.full_cache())
            self.controls.put(key, full.to_dict(), computed=False)
        return full

    def _stored_control(
        self, identity: CellIdentity, prompt: Prompt, source: Source
    ) -> tuple[str, Answer | None]:
        """The control store's key for one source and its stored answer, if any (also under the
        split-based key older kvx stored it by: ``kvx.controls``)."""
        rendered, content = prompt_hash(prompt), source.digest()
        key = answer_key(identity, rendered, content)
        stored = self.controls.find(key, split_key(identity, rendered, content))
        return key, None if stored is None else Answer.from_dict(stored)

    def transformed(
        self, cell: Cell, identity: CellIdentity, reader: LoadedReader, source: Source
    ) -> Transformed | None:
        """The transform stage through the artifact store: each (row, transform config) output is
        computed once and replayed byte-identically to every reader and cell (per reader only for
        transforms that use it), with a manifest of what produced it."""
        if cell.transform.identity:
            return None
        # the row's pool as every reader sees it: one artifact per row across a panel
        scope = {"transform": identity.transform, "pool_sha256": source.digest(reader_free=True)}
        if cell.transform.uses_reader:
            scope["reader"] = reader.key
        key = control_key(**scope)
        stored = self.artifacts.get(key)
        if stored is not None:
            segments = [Segment(**s) for s in stored["segments"]]
            out = transform_source(cell.transform, cell.transform_name, source, segments)
            if out is None or out.info["context_sha256"] != stored["text_sha256"]:
                where = self.artifacts.path(key)
                raise ValueError(f"stored artifact {where} fails its sha256 check: delete it to recompute")
            return out
        segments = list(cell.transform.apply(source))
        out = transform_source(cell.transform, cell.transform_name, source, segments)
        assert out is not None
        manifest = {
            "row_id": source.id,
            **scope,
            "text_sha256": out.info["context_sha256"],
            "versions": versions(),
            "segments": [dataclasses.asdict(s) for s in segments],
        }
        self.artifacts.put(key, manifest)
        return out

    def compressed(
        self, cell: Cell, reader: LoadedReader, prompt: Prompt, ratio: float | None = None
    ) -> tuple[Generation, CompressedRun]:
        """Compress and decode one prompt (``ratio``: this context's, default the cell's)."""
        ratio = cell.ratio if ratio is None else ratio
        cache, run = compress(self.caches, reader, cell.compressor, ratio, prompt, cell.query_aware)
        return decode_compressed(reader, run, cache, cell.max_new_tokens), run

    def run_cell(
        self,
        cell: Cell,
        reader: LoadedReader,
        progress: bool = True,
        config_hash: str | None = None,
        tracer: Tracer | None = None,
    ) -> list[Record]:
        return self.run_cells([cell], reader, progress, [config_hash], [tracer or Tracer()])[0]

    @torch.inference_mode()
    def run_cells(
        self,
        cells: list[Cell],
        reader: LoadedReader,
        progress: bool = True,
        config_hashes: list[str | None] | None = None,
        tracers: list[Tracer] | None = None,
        resume: bool = True,
        release: bool | None = None,
    ) -> list[list[Record]]:
        """Every cell's records, source by source: cells sharing a control split run together, so
        one source's prefill is in memory at a time, serves every cell, and the FullCache control and
        the compressed caches decode in one batch. Sampled (traced) sources run cell by cell, so
        each trace keeps its own spans. Each finished source is spooled (``kvx.stores.spool``): a run
        that was stopped resumes at the sources it reached (unless ``resume`` is false).
        ``release`` (default: with more than one cell) drops each source's capture once it is
        done instead of keeping it in the LRU for cells a caller runs later."""
        release = len(cells) > 1 if release is None else release
        hashes = config_hashes or [None] * len(cells)
        tracers = tracers or [Tracer() for _ in cells]
        plans = [self._plan(c, reader, h) for c, h in zip(cells, hashes)]
        spools = [Spool(self.partial, p.identity.id, p.base["config_hash"]) for p in plans]
        if not resume:
            for spool in spools:
                spool.remove()
        spooled = [spool.load() for spool in spools]
        out: list[list[Record]] = [[] for _ in cells]
        groups: dict[str, list[int]] = {}
        for i, plan in enumerate(plans):
            groups.setdefault(plan.identity.split, []).append(i)
        for members in groups.values():
            for c in members:
                cells[c].transform.bind(reader)
            first = cells[members[0]]
            label = first.label() if len(members) == 1 else f"{first.task_name}: {len(members)} cells"
            sources = self.sources(first, reader)
            later = Counter(s.context for s in sources)  # contexts still to come: shared ones stay
            for source in tqdm(sources, desc=label, disable=not progress, leave=False):
                later[source.context] -= 1
                done = {c: spooled[c].get(plans[c].key(cells[c], source)) for c in members}
                todo = [c for c in members if done[c] is None]
                if any(sampled(tracers[c].sample, source.id) for c in todo):
                    done.update(
                        {c: self._traced(cells[c], reader, plans[c], source, tracers[c]) for c in todo}
                    )
                elif todo:
                    done.update(
                        zip(
                            todo,
                            self._batched(
                                [(cells[c], plans[c]) for c in todo],
                                reader,
                                source,
                                release,
                                keep_shared=later[source.context] > 0,
                            ),
                        )
                    )
                if release:
                    trim_memory()  # the source's tensors are freed: give their pages back
                for c in members:
                    if c in todo:
                        validate(done[c].to_dict())
                        spools[c].add(done[c])
                    else:
                        self.resumed[plans[c].identity.id] += 1
                    out[c].append(done[c])
        for spool in spools:
            spool.remove()  # complete: the caller holds every record now
        return out

    def _plan(self, cell: Cell, reader: LoadedReader, config_hash: str | None) -> _Plan:
        """What every record of a cell shares: its identity, base fields and key tail."""
        identity = cell.identity(reader.identity)
        base = {
            "task": cell.task_name,
            "reader": reader.label or reader.name,
            "reader_family": reader.family,
            "prompt_format": reader.prompt_format,
            "model_revision": reader.revision,
            "compressor": cell.press_name,
            "seed": cell.seed,
            "query_aware": cell.query_aware,
            "split": identity.split,
            "config_hash": config_hash or identity.id,
            "cell": {"id": identity.id, "fields": identity.flat()},
            "versions": versions(),
            "contrast": dict(type(cell.task).contrast) or None,
            "task_family": type(cell.task).family,
        }
        # key = task/<source>/reader@revision/compressor/setting/seed/cell id: unique per source and cell
        tail = "/".join(
            [f"{base['reader']}@{reader.revision}", cell.press_name, _setting_key(identity.setting)]
            + [f"seed={cell.seed}", identity.id]
        )
        return _Plan(identity, base, tail)

    def _traced(
        self, cell: Cell, reader: LoadedReader, plan: _Plan, source: Source, tracer: Tracer
    ) -> Record:
        started = time.perf_counter()
        label = cell.label()
        inputs = {"source_id": source.id, "question": source.question, "references": list(source.answers)}
        with reader.autocast(), tracer.source(f"{label} | {source.id}", source.id, inputs) as root:
            root.set_attribute("kvx.cell_id", plan.identity.id)
            record = self.run_source(
                cell, reader, plan.identity, source, plan.key(cell, source), plan.base, tracer
            )
            root.set_outputs(
                {
                    "status": record.status,
                    "reason": record.reason,
                    "transition": record.transition,
                    "full": (record.full.output if record.full else None),
                    "compressed": (record.compressed.output if record.compressed else None),
                }
            )
        record.seconds = time.perf_counter() - started
        return record

    def run_source(
        self,
        cell: Cell,
        reader: LoadedReader,
        identity: CellIdentity,
        source: Source,
        key: str,
        base: dict,
        tracer: Tracer | None = None,
    ) -> Record:
        """Every stage for one source of one cell, decoded alone (traced sources take this path)."""
        tracer = tracer or Tracer()
        with tracer.stage("encode", {"context_chars": len(source.context)}) as span:
            prompt = encode(reader, source)
            span.set_outputs(
                {
                    "context_tokens": prompt.context_ids.shape[1],
                    "question_tokens": prompt.question_ids.shape[1],
                }
            )
        record, job = self._open(cell, reader, identity, source, prompt, key, base, tracer)
        if job is None:
            return record
        self._count(identity.id, "alone: traced source")
        try:
            with tracer.stage("control", {"compressor": "FullCache"}) as span:
                job.record.full = self.control(cell, reader, source, prompt, identity)
                span.set_outputs(job.record.full.to_dict())
        except Exception as exc:  # no control, no pair: an error, not a wrong answer
            job.record.fail("error", f"FullCache control: {type(exc).__name__}: {exc}")
            return job.record
        self._compress(job, reader, tracer)
        if job.ok:
            try:
                with tracer.stage("decode", {"max_new_tokens": cell.max_new_tokens}, "LLM") as span:
                    gen = decode_compressed(reader, job.run, job.cache, cell.max_new_tokens)
                    span.set_outputs(
                        {"text": gen.text, "new_tokens": len(gen.token_ids), "stop": gen.stop_reason}
                    )
            except Exception as exc:  # recorded, counted, never scored as wrong
                job.record.fail("error", f"{type(exc).__name__}: {exc}")
                return job.record
            self._close(job, reader, gen, tracer)
        return job.record

    def _batched(
        self,
        members: list[tuple[Cell, _Plan]],
        reader: LoadedReader,
        source: Source,
        release: bool,
        keep_shared: bool = True,
    ) -> list[Record]:
        """One source for several cells of a split: one encode, one capture, and the FullCache
        control and compressed caches decoded together (``kvx.pipeline.batched``). With ``release``
        the capture leaves memory before decoding when nothing after needs it, and so do this
        source's shared compressed contexts unless ``keep_shared`` (a later source has its context)."""
        started = time.perf_counter()
        with reader.autocast(), self.caches.holding(release):
            prompt = encode(reader, source)
            records: list[Record] = []
            jobs: list[_Job] = []
            for cell, plan in members:
                record, job = self._open(
                    cell, reader, plan.identity, source, prompt, plan.key(cell, source), plan.base
                )
                records.append(record)
                if job is not None:
                    jobs.append(job)
            if jobs:
                for job in self._control_and_batch(jobs, reader, source, prompt, release, keep_shared):
                    self._alone(job, reader)
        seconds = (time.perf_counter() - started) / len(records)
        for record in records:
            record.seconds = seconds  # the source's time, shared equally by its cells
        return records

    def _control_and_batch(
        self,
        jobs: list[_Job],
        reader: LoadedReader,
        source: Source,
        prompt: Prompt,
        release: bool = False,
        keep_shared: bool = True,
    ) -> list[_Job]:
        """Compress the jobs that can join a batch, decode them with the control (unless stored)
        in one batch and close them; return the jobs that must decode alone, each after the
        batch with the model state its compression set (AdaKV's head masks) put back.

        Once every job is compressed and none runs diagnostics (which rebuild caches from the
        capture), ``release`` drops the capture before decoding, and the shared compressed contexts
        unless ``keep_shared``: the decode then holds the caches it reads and nothing else."""
        cell = jobs[0].cell
        key, full = self._stored_control(cell.identity(reader.identity), prompt, source)
        control: DecodeJob | None = None
        control_cost: dict = {}
        try:
            if full is None:
                control = self._control_job(reader, prompt, cell.max_new_tokens)
                control_cost = cache_cost(control.cache)  # before decoding appends to it
        except Exception as exc:
            for job in jobs:
                job.record.fail("error", f"FullCache control: {type(exc).__name__}: {exc}")
            return []
        model = reader.model
        together: list[_Job] = []
        alone: list[_Job] = []
        for job in jobs:
            impl = job.cell.compressor.attn_implementation
            if impl not in SAME_ATTENTION:  # known before compressing: compressed when it decodes
                self._count(job.record.cell["id"], f"alone: attention {impl} decodes alone")
                alone.append(job)
                continue
            clear_head_masks(model)
            self._compress(job, reader)
            if release:  # the prefill's and the press's temporaries: pages back before the next
                trim_memory()
            if not job.ok:
                continue
            why = batchable(job.cache, job.run.decode_impl, model)
            self._count(job.record.cell["id"], f"alone: {why}" if why else "batched")
            if why is None:
                together.append(job)
            else:
                job.masks = [getattr(m, "masked_key_indices", None) for m in attention_layers(model)]
                alone.append(job)
        if full is not None:  # the compressions have captured the prefill, if any needs it
            full = self._with_bytes(key, full, reader, prompt)
        if release and all(j.cache is not None and not j.cell.diagnostics for j in together + alone):
            self.caches.drop_held(shared=not keep_shared)
            for job in jobs:
                if job.run is not None:
                    job.run.capture = None
            trim_memory()  # the capture's pages, before the decode's buffers take new ones
        decodes = [control] if control is not None else []
        decodes += [DecodeJob(j.cache, j.run.feed, j.run.start, j.cell.max_new_tokens) for j in together]
        gens = self._decode_all(reader, decodes)
        if control is not None:
            gen = gens.pop(0)
            try:
                if isinstance(gen, Exception):
                    raise gen
                full = evaluate(cell.task, gen, source)
                full.cost = {**control_cost, **decode_cost(gen)}
                self.controls.put(key, full.to_dict())
            except Exception as exc:
                for job in jobs:
                    job.record.fail("error", f"FullCache control: {type(exc).__name__}: {exc}")
                return []
        for job in jobs:
            job.record.full = full
        for job, gen in zip(together, gens):
            if isinstance(gen, Exception):
                job.record.fail("error", f"{type(gen).__name__}: {gen}")
            else:
                job.run.first_logits = gen.first_logits
                self._close(job, reader, gen)
        return [job for job in alone if job.ok]

    def _control_job(self, reader: LoadedReader, prompt: Prompt, max_new_tokens: int) -> DecodeJob:
        """The FullCache control's decode (its cache shares the capture's tensors, not the capture)."""
        capture = self.caches.capture(reader, prompt.context_ids)
        return DecodeJob(capture.full_cache(), prompt.question_ids, capture.n_tokens, max_new_tokens)

    def _alone(self, job: _Job, reader: LoadedReader) -> None:
        """Decode one job by itself and close it, its compression's model state in place."""
        model = reader.model
        if job.cache is None:
            clear_head_masks(model)
            self._compress(job, reader)
        else:
            for module, mask in zip(attention_layers(model), job.masks or []):
                module.masked_key_indices = mask
        try:
            if job.ok:
                try:
                    gen = decode_compressed(reader, job.run, job.cache, job.cell.max_new_tokens)
                except Exception as exc:  # recorded, counted, never scored as wrong
                    job.record.fail("error", f"{type(exc).__name__}: {exc}")
                    return
                self._close(job, reader, gen)
        finally:
            clear_head_masks(model)

    def _decode_all(self, reader: LoadedReader, decodes: list[DecodeJob]) -> list[Generation | Exception]:
        """Batches of jobs sharing their feed; a batch that fails is retried job by job, so an
        error belongs to the cache that caused it."""
        out: list[Generation | Exception | None] = [None] * len(decodes)
        by_feed: dict[bytes, list[int]] = {}
        for i, d in enumerate(decodes):
            by_feed.setdefault(d.feed.cpu().numpy().tobytes(), []).append(i)
        for members in by_feed.values():
            clear_head_masks(reader.model)
            try:
                gens = greedy_decode_batch(reader.model, reader.tokenizer, [decodes[i] for i in members])
            except Exception:
                gens = []
                for i in members:
                    d = decodes[i]
                    try:
                        gens.append(
                            greedy_decode(
                                reader.model, reader.tokenizer, d.cache, d.feed, d.start, d.max_new_tokens
                            )
                        )
                    except Exception as exc:
                        gens.append(exc)
            for i, gen in zip(members, gens):
                out[i] = gen
        return out  # type: ignore[return-value]

    def _open(
        self,
        cell: Cell,
        reader: LoadedReader,
        identity: CellIdentity,
        source: Source,
        prompt: Prompt,
        key: str,
        base: dict,
        tracer: Tracer | None = None,
    ) -> tuple[Record, _Job | None]:
        """The record of one source and cell, through the transform and the setting's resolution,
        with the job to compress, or None when the record is already final."""
        tracer = tracer or Tracer()
        n_ctx = int(prompt.context_ids.shape[1])
        record = Record(
            key=key,
            status="supported",
            reason="",
            source_id=source.id,
            references=list(source.answers),
            setting={},
            prompt_hash=prompt_hash(prompt),
            n_context_tokens=n_ctx,
            n_question_tokens=int(prompt.question_ids.shape[1]),
            **base,
        )
        try:
            with tracer.stage("transform", {"transform": cell.transform_name}) as span:
                transformed = self.transformed(cell, identity, reader, source)
                if transformed is not None:
                    span.set_outputs({"context": transformed.source.context, **transformed.info})
        except Exception as exc:  # a transform that fails on a source: never a wrong answer
            asked = identity.setting
            record.setting = _setting_dict(
                Setting(asked.value if asked.kind == "ratio" else 0.0, None), asked
            )
            if isinstance(exc, Unsupported):
                record.fail("unsupported", f"transform {cell.transform_name}: {exc}")
            else:
                record.fail("error", f"transform {cell.transform_name}: {type(exc).__name__}: {exc}")
            return record, None
        comp_source, comp_prompt = source, prompt
        if transformed is not None:
            comp_source, comp_prompt = transformed.source, encode(reader, transformed.source)
            record.transform = _transform_info(transformed, comp_prompt, n_ctx)
            record.compressed_text_sha256 = transformed.info["context_sha256"]
        n_compressed = int(comp_prompt.context_ids.shape[1])
        if cell.query_aware and identity.setting.kind == "budget_tokens":
            n_compressed += int(comp_prompt.question_ids.shape[1]) - 1  # the question is compressed too
        setting = cell.compressor.resolve(identity.setting, n_compressed, reader.model)
        record.setting = _setting_dict(setting, identity.setting)
        if not setting.supported:
            record.fail("unsupported", setting.reason)
            return record, None
        return record, _Job(cell, record, setting, comp_source, comp_prompt, transformed)

    def _compress(self, job: _Job, reader: LoadedReader, tracer: Tracer | None = None) -> None:
        cell, setting = job.cell, job.setting
        n_compressed = int(job.prompt.context_ids.shape[1])
        try:
            inputs = {"compressor": cell.press_name, "ratio": setting.ratio, "tokens": n_compressed}
            with (tracer or Tracer()).stage("compress", inputs) as span:
                job.cache, job.run = compress(
                    self.caches, reader, cell.compressor, setting.ratio, job.prompt, cell.query_aware, tracer
                )
                capture = job.run.capture
                job.cost = {  # the cache as decoding will find it
                    **cache_cost(job.cache, reader.model),
                    "compress_s": round(job.run.seconds, 4),
                    "prefill_s": None if capture is None else round(capture.seconds, 4),
                }
                span.set_outputs(
                    {"cache_tokens": job.cache.get_seq_length(), "retained_share": setting.retained_share}
                )
        except Exception as exc:  # recorded, counted, never scored as wrong
            job.record.fail("error", f"{type(exc).__name__}: {exc}")

    def _close(self, job: _Job, reader: LoadedReader, gen: Generation, tracer: Tracer | None = None) -> None:
        """Evaluate the compressed answer, pair it with the control and run the diagnostics."""
        tracer = tracer or Tracer()
        record, cell = job.record, job.cell
        try:
            with tracer.stage("evaluate") as span:
                answer = evaluate(cell.task, gen, job.source)
                span.set_outputs({"correct": answer.correct, "score": answer.score})
        except Exception as exc:  # recorded, counted, never scored as wrong
            record.fail("error", f"{type(exc).__name__}: {exc}")
            return
        answer.cost = {**job.cost, **decode_cost(gen)} if job.cost is not None else None
        record.pair(record.full, answer)
        if cell.diagnostics:
            view = {
                "full": record.full.to_dict(),
                "compressed": answer.to_dict(),
                "transition": record.transition,
            }
            ctx = DiagnosticContext(
                reader,
                job.source,
                job.prompt,
                job.run,
                view,
                cell.max_new_tokens,
                lambda text: cell.task.evaluate(text, job.source).correct,
            )
            record.diagnostics, record.category = diagnose(
                cell.diagnostics, ctx, job.transformed is not None, tracer
            )


@dataclass
class _Plan:
    identity: CellIdentity
    base: dict
    tail: str

    def key(self, cell: Cell, source: Source) -> str:
        return f"{cell.task_name}/{source.id}/{self.tail}"


@dataclass
class _Job:
    """One cell's source between the setting's resolution and its answer."""

    cell: Cell
    record: Record
    setting: Setting
    source: Source  # what the compressor saw (transformed, when a transform ran)
    prompt: Prompt
    transformed: Transformed | None
    cache: Cache | None = None
    run: CompressedRun | None = None
    masks: list | None = None  # AdaKV's per-head masks its compression set, for its own decode
    cost: dict | None = None  # the compressed cache's bytes and build time (kvx.modeling.costs)

    @property
    def ok(self) -> bool:
        return self.record.status == "supported" and not self.record.reason


def _setting_key(spec: SettingSpec) -> str:
    if spec.kind == "ratio":
        return f"ratio={spec.value}"
    if spec.kind == "budget_tokens":
        return f"budget_tokens={spec.value}"
    return "setting=none"


def _setting_dict(setting: Setting, spec: SettingSpec) -> dict:
    return {
        "kind": spec.kind,
        "value": spec.value,
        "ratio": setting.ratio,
        "retained_share": setting.retained_share,
        "method_parameter": setting.method_parameter,
    }


def _transform_info(transformed: Transformed, prompt: Prompt, n_original: int) -> dict:
    """What the record says about a transform: hashes, kept segments, retained token share."""
    return {**transformed.info, "retained_token_share": int(prompt.context_ids.shape[1]) / n_original}
