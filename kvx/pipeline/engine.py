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
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

import torch
from tqdm.auto import tqdm

from kvx.capture import CaptureCache
from kvx.compressors import attention
from kvx.compressors.base import Compressor, Setting
from kvx.controls import ControlStore, control_key
from kvx.diagnostics.base import Diagnostic
from kvx.diagnostics.context import DiagnosticContext
from kvx.errors import ConfigError, Unsupported
from kvx.generation import Generation
from kvx.identity import CellIdentity, SettingSpec, component, fields_of
from kvx.lru import ByteLRU
from kvx.pipeline.compress import Caches, CompressedRun, compress
from kvx.pipeline.decode import decode_compressed, decode_control
from kvx.pipeline.diagnose import diagnose
from kvx.pipeline.encode import encode, prompt_hash
from kvx.pipeline.evaluate import evaluate
from kvx.pipeline.transform import Transformed, transform_source
from kvx.readers.base import LoadedReader, Prompt
from kvx.records import Answer, Record, validate
from kvx.tasks.base import Segment, Source, Task
from kvx.tracing import Tracer
from kvx.transforms.base import Transform
from kvx.transforms.none import Identity


@dataclass
class Cell:
    """One cell's resolved settings. Names are canonical registry names (``kvx.registry.canonical``)."""

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
        #: text-transform outputs, content-addressed: computed once per (row, transform config)
        self.artifacts = ControlStore(outputs_dir / "artifacts")
        self.caches = Caches(CaptureCache(capture_cache_bytes), ByteLRU(memo_bytes))
        self._splits: dict[str, list[Source]] = {}

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

    def control(self, cell: Cell, reader: LoadedReader, source: Source, prompt: Prompt, split: str) -> Answer:
        """The FullCache answer of one source: from the store, or decoded once and stored."""
        key = control_key(split=split, prompt=prompt_hash(prompt), source=source.digest())
        stored = self.controls.get(key)
        if stored is not None:
            return Answer.from_dict(stored)
        capture = self.caches.capture(reader, prompt.context_ids)
        answer = evaluate(cell.task, decode_control(reader, capture, prompt, cell.max_new_tokens), source)
        self.controls.put(key, answer.to_dict())
        return answer

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

    @torch.inference_mode()
    def run_cell(
        self,
        cell: Cell,
        reader: LoadedReader,
        progress: bool = True,
        config_hash: str | None = None,
        tracer: Tracer | None = None,
    ) -> list[Record]:
        identity = cell.identity(reader.identity)
        flat = identity.flat()
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
            "cell": {"id": identity.id, "fields": flat},
            "versions": versions(),
            "contrast": dict(type(cell.task).contrast) or None,
            "task_family": type(cell.task).family,
        }
        label = cell.label()
        # key = task/<source>/reader@revision/compressor/setting/seed/cell id: unique per source and cell
        tail = "/".join(
            [f"{base['reader']}@{reader.revision}", cell.press_name, _setting_key(identity.setting)]
            + [f"seed={cell.seed}", identity.id]
        )
        cell.transform.bind(reader)
        tracer = tracer or Tracer()
        records = []
        for source in tqdm(self.sources(cell, reader), desc=label, disable=not progress, leave=False):
            started = time.perf_counter()
            inputs = {"source_id": source.id, "question": source.question, "references": list(source.answers)}
            with reader.autocast(), tracer.source(f"{label} | {source.id}", source.id, inputs) as root:
                root.set_attribute("kvx.cell_id", identity.id)
                record = self.run_source(
                    cell, reader, identity, source, f"{cell.task_name}/{source.id}/{tail}", base, tracer
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
            validate(record.to_dict())
            records.append(record)
        return records

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
        """Every stage for one source of one cell; nothing here outlives the source but the caches."""
        tracer = tracer or Tracer()
        with tracer.stage("encode", {"context_chars": len(source.context)}) as span:
            prompt = encode(reader, source)
            n_ctx = int(prompt.context_ids.shape[1])
            span.set_outputs({"context_tokens": n_ctx, "question_tokens": int(prompt.question_ids.shape[1])})
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
            return record
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
            return record
        try:
            with tracer.stage("control", {"compressor": "FullCache"}) as span:
                record.full = self.control(cell, reader, source, prompt, identity.split)
                span.set_outputs(record.full.to_dict())
        except Exception as exc:  # no control, no pair: an error, not a wrong answer
            record.fail("error", f"FullCache control: {type(exc).__name__}: {exc}")
            return record
        try:
            inputs = {"compressor": cell.press_name, "ratio": setting.ratio, "tokens": n_compressed}
            with tracer.stage("compress", inputs) as span:
                cache, run = compress(
                    self.caches, reader, cell.compressor, setting.ratio, comp_prompt, cell.query_aware, tracer
                )
                span.set_outputs(
                    {"cache_tokens": cache.get_seq_length(), "retained_share": setting.retained_share}
                )
            with tracer.stage("decode", {"max_new_tokens": cell.max_new_tokens}, "LLM") as span:
                gen = decode_compressed(reader, run, cache, cell.max_new_tokens)
                span.set_outputs(
                    {"text": gen.text, "new_tokens": len(gen.token_ids), "stop": gen.stop_reason}
                )
            with tracer.stage("evaluate") as span:
                answer = evaluate(cell.task, gen, comp_source)
                span.set_outputs({"correct": answer.correct, "score": answer.score})
        except Exception as exc:  # recorded, counted, never scored as wrong
            record.fail("error", f"{type(exc).__name__}: {exc}")
            return record
        record.pair(record.full, answer)
        if cell.diagnostics:
            view = {
                "full": record.full.to_dict(),
                "compressed": answer.to_dict(),
                "transition": record.transition,
            }
            ctx = DiagnosticContext(reader, cell, comp_source, comp_prompt, run, view)
            record.diagnostics, record.category = diagnose(
                cell.diagnostics, ctx, transformed is not None, tracer
            )
        return record


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
