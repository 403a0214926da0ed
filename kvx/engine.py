"""The run engine: one cell = one task split x reader x compressor x setting x seed.

Per source, the FullCache control is computed once and reused by every cell (ControlStore);
the context is prefilled once per process and every fast-path compressor builds its cache from
that capture (CaptureCache). Failures on one source become an ``error`` record; settings a
compressor cannot honour become ``unsupported`` records. Neither is ever scored.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import Cache, DynamicCache, QuantizedCache

from kvx.capture import Capture, CaptureCache, capture_prefill
from kvx.compressors import attention
from kvx.compressors.base import Compressor, RetainedMap, Setting
from kvx.compressors.kvpress_adapter import attention_layers, clear_head_masks
from kvx.controls import ControlStore, control_key
from kvx.diagnostics.base import Diagnostic, DiagnosticResult
from kvx.diagnostics.categories import categorize, category_row
from kvx.diagnostics.context import DiagnosticContext
from kvx.errors import ConfigError
from kvx.generation import Generation, greedy_decode
from kvx.readers.base import LoadedReader, Prompt, attn_implementation
from kvx.records import SCHEMA_VERSION, transition, validate
from kvx.tasks.base import Source, Task

FULL_SIDE_KEPT = 256  # FullCache-side diagnostic results kept (reference logits: T x vocab floats each)
SHARED_CONTEXTS_KEPT = 16  # compressed contexts kept for reuse by later sources with the same context


@dataclass
class SharedContext:
    """A compressed context as compression left it: the layers' K/V, the retained-position map
    and any per-head masks the compressor set on the model (AdaKV), so a later source with the
    same context and compressor decodes from it without compressing again."""

    layers: list[tuple[torch.Tensor, torch.Tensor]]
    retained: RetainedMap | None
    head_masks: list[Any]


@dataclass
class Cell:
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


def versions() -> dict[str, str]:
    return {d: version(d) for d in ("kvx", "torch", "transformers", "kvpress")}


def ids_digest(ids: torch.Tensor) -> str:
    """Content key of a token-id tensor (captured prefills, shared compressed contexts)."""
    return hashlib.sha256(ids.detach().cpu().to(torch.int64).numpy().tobytes()).hexdigest()


def prompt_hash(prompt: Prompt) -> str:
    digest = hashlib.sha256()
    for ids in (prompt.context_ids, prompt.question_ids):
        digest.update(ids.detach().cpu().to(torch.int64).numpy().tobytes())
        digest.update(b"|")
    return digest.hexdigest()


class Engine:
    """Process-wide state shared by every cell a process runs."""

    def __init__(self, outputs_dir: Path, capture_cache_bytes: int) -> None:
        attention.register()
        self.controls = ControlStore(outputs_dir / "controls")
        self.captures = CaptureCache(capture_cache_bytes)
        self._splits: dict[str, list[Source]] = {}
        self.prefills = 0  # context prefills actually run by this process
        #: FullCache-side diagnostic results per (diagnostic, prompt, reference): the same for every cell
        self.full_side: OrderedDict[str, Any] = OrderedDict()
        #: compressed contexts shared by sources (one catalog, many requests): built once per
        #: (context, compressor config, ratio) when the compressor does not see the question
        self.shared_contexts: OrderedDict[tuple[str, str, float], SharedContext] = OrderedDict()
        self.compressions = 0  # compressor runs actually done (fast or hook path)

    def sources(self, cell: Cell, reader: LoadedReader) -> list[Source]:
        key = repr(
            (cell.task_name, asdict(cell.task), cell.seed, cell.n_sources, cell.context_tokens, reader.name)
        )
        if key not in self._splits:
            try:
                split = cell.task.sources(cell.n_sources, cell.seed, cell.context_tokens, reader.count_tokens)
            except ValueError as exc:  # e.g. context_tokens too small for the task: the user's to fix
                raise ConfigError(f"task={cell.task_name}: {exc}") from exc
            self._splits[key] = split
        return self._splits[key]

    def full_side_memo(self, key: str, compute: Callable[[], Any]) -> Any:
        """Compute a FullCache-side result once per process and source (LRU of FULL_SIDE_KEPT)."""
        if key not in self.full_side:
            self.full_side[key] = compute()
            while len(self.full_side) > FULL_SIDE_KEPT:
                self.full_side.popitem(last=False)
        return self.full_side[key]

    def split_key(self, cell: Cell, reader: LoadedReader) -> str:
        """Identity of the control group: task split, reader, decoding config."""
        return control_key(
            task=cell.task_name,
            task_config=asdict(cell.task),
            scorer=type(cell.task).scorer_version,
            seed=cell.seed,
            n_sources=cell.n_sources,
            context_tokens=cell.context_tokens,
            reader=reader.name,
            revision=reader.revision,
            max_new_tokens=cell.max_new_tokens,
        )

    def _capture(self, reader: LoadedReader, ids: torch.Tensor, key: str | None = None) -> Capture:
        key = key or ids_digest(ids)
        capture = self.captures.get(key)
        if capture is None:
            self.prefills += 1
            capture = capture_prefill(reader.model, ids)
            self.captures.put(key, capture)
        return capture

    def _answer(self, gen: Generation, source: Source, task: Task) -> dict[str, Any]:
        score = float(task.score(gen.text, source))
        answer = {
            "output": gen.text,
            "normalized": task.normalize(gen.text),
            "score": score,
            "correct": bool(task.is_correct(score)),
            "token_ids": gen.token_ids,
            "stop_reason": gen.stop_reason,
        }
        metrics, details = task.metrics(gen.text, source), task.details(gen.text, source)
        if metrics:
            answer["metrics"] = {k: float(v) for k, v in metrics.items()}
        if details:
            answer["details"] = details
        return answer

    def control(self, cell: Cell, reader: LoadedReader, source: Source, prompt: Prompt, split: str) -> dict:
        key = control_key(split=split, prompt=prompt_hash(prompt), source=source.digest())
        stored = self.controls.get(key)
        if stored is not None:
            return stored
        capture = self._capture(reader, prompt.context_ids)
        clear_head_masks(reader.model)  # an earlier AdaKV cell's masks must not reach the control
        gen = greedy_decode(
            reader.model,
            reader.tokenizer,
            capture.full_cache(),
            prompt.question_ids,
            capture.n_tokens,
            cell.max_new_tokens,
        )
        answer = self._answer(gen, source, cell.task)
        self.controls.put(key, answer)
        return answer

    def compressed(
        self, cell: Cell, reader: LoadedReader, prompt: Prompt
    ) -> tuple[Generation, CompressedRun]:
        model, comp = reader.model, cell.compressor
        n_ctx = prompt.context_ids.shape[1]
        if cell.query_aware:  # the question (all but its last token) goes through the compressor
            prefill_ids = torch.cat([prompt.context_ids, prompt.question_ids[:, :-1]], dim=1)
            feed = prompt.question_ids[:, -1:]
        else:
            prefill_ids, feed = prompt.context_ids, prompt.question_ids
        digest = ids_digest(prefill_ids)  # keys both the captured prefill and the shared compressed context
        capture = self._capture(reader, prefill_ids, digest) if comp.fast_path else None
        shared = None if cell.query_aware else (digest, repr(comp), cell.ratio)
        run = CompressedRun(self, cell, reader, prefill_ids, feed, capture, shared)
        cache = run.build()
        if run.retained is None:
            run.retained = comp.retained_map(model, cache, capture, cell.ratio)
        start = prefill_ids.shape[1] if cell.query_aware else n_ctx
        if comp.decode_from_cache_length:
            start = cache.get_seq_length()
        run.start = start
        with attn_implementation(model, run.decode_impl):
            gen = greedy_decode(model, reader.tokenizer, cache, feed, start, cell.max_new_tokens)
        run.first_logits = gen.first_logits
        return gen, run

    @torch.inference_mode()
    def run_cell(
        self, cell: Cell, reader: LoadedReader, config_hash: str, progress: bool = True
    ) -> list[dict[str, Any]]:
        split = self.split_key(cell, reader)
        base = {
            "schema_version": SCHEMA_VERSION,
            "split": split,
            "task": cell.task_name,
            "reader": reader.name,
            "model_revision": reader.revision,
            "compressor": cell.press_name,
            "seed": cell.seed,
            "query_aware": cell.query_aware,
            "config_hash": config_hash,
            "versions": versions(),
        }
        if type(cell.task).contrast:  # self-describing: which metric each string anchor stands in for
            base["contrast"] = dict(type(cell.task).contrast)
        records = []
        sources = self.sources(cell, reader)
        label = f"{cell.press_name}@{cell.ratio}"
        for source in tqdm(sources, desc=label, disable=not progress, leave=False):
            started = time.perf_counter()
            with reader.autocast():
                prompt = reader.encode(source.context, source.question, source.answer_prefix)
                n_ctx = int(prompt.context_ids.shape[1])
                setting = cell.compressor.setting(cell.ratio, n_ctx, reader.model)
                record = {
                    **base,
                    "key": "/".join(
                        [cell.task_name, source.id, f"{reader.name}@{reader.revision}", cell.press_name]
                        + [f"ratio={cell.ratio}", f"seed={cell.seed}"]
                    ),
                    "source_id": source.id,
                    "references": list(source.answers),
                    "setting": setting_dict(setting),
                    "prompt_hash": prompt_hash(prompt),
                    "n_context_tokens": n_ctx,
                    "n_question_tokens": int(prompt.question_ids.shape[1]),
                    "full": None,
                    "compressed": None,
                    "transition": None,
                }
                if not setting.supported:
                    record.update(status="unsupported", reason=setting.reason)
                else:
                    try:
                        record["full"] = self.control(cell, reader, source, prompt, split)
                    except Exception as exc:  # no control, no pair: an error, not a wrong answer
                        record.update(
                            status="error", reason=f"FullCache control: {type(exc).__name__}: {exc}"
                        )
                    else:
                        record.update(self._compressed_record(cell, reader, prompt, source, record["full"]))
            record["seconds"] = time.perf_counter() - started
            validate(record)
            records.append(record)
        return records

    def _compressed_record(
        self, cell: Cell, reader: LoadedReader, prompt: Prompt, source: Source, full: dict[str, Any]
    ) -> dict[str, Any]:
        try:
            gen, run = self.compressed(cell, reader, prompt)
            comp = self._answer(gen, source, cell.task)
        except Exception as exc:  # recorded, counted, never scored as wrong
            return {"status": "error", "reason": f"{type(exc).__name__}: {exc}"}
        out = {
            "status": "supported",
            "reason": "",
            "compressed": comp,
            "transition": transition(full["correct"], comp["correct"]),
        }
        if cell.diagnostics:
            ctx = DiagnosticContext(reader, cell, source, prompt, run, {"full": full, **out})
            out["diagnostics"] = {name: run_diagnostic(diag, ctx) for name, diag in cell.diagnostics}
            if out["transition"] == "C→W":
                out["category"] = categorize(category_row(out["diagnostics"]))
        return out


class CompressedRun:
    """One source's compressed cache and how to rebuild it, for diagnostics after decoding.

    Decoding appends to the cache; diagnostics need the cache as compression left it. Fast-path
    compressors rebuild it from the captured prefill (press scoring only); hook-path ones have
    their DynamicCache cut back to the compressed lengths. Neither prefills the context again.
    """

    def __init__(
        self,
        engine: Engine,
        cell: Cell,
        reader: LoadedReader,
        prefill_ids: torch.Tensor,
        feed: torch.Tensor,
        capture: Capture | None,
        shared_key: tuple[str, str, float] | None,
    ) -> None:
        self.engine, self.cell, self.reader = engine, cell, reader
        self.prefill_ids, self.feed, self.capture = prefill_ids, feed, capture
        #: (context, compressor config, ratio) when sources may share this compressed context:
        #: only when the compressor never sees their question
        self.shared_key = shared_key
        self.retained: RetainedMap | None = None
        self.start = 0
        self.decode_impl: str | None = cell.compressor.attn_implementation
        self.first_logits: torch.Tensor | None = None
        self._cache: Cache | None = None
        self._lengths: list[int] = []
        self._quantized: list[object] = []

    def build(self) -> Cache:
        comp, model = self.cell.compressor, self.reader.model
        key = self.shared_key
        shared = self.engine.shared_contexts.get(key) if key else None
        if shared is not None:
            self.engine.shared_contexts.move_to_end(key)
            cache = DynamicCache()
            for idx, (k, v) in enumerate(shared.layers):  # shares storage: decoding appends new tensors
                cache.update(k, v, idx)
            for module, mask in zip(attention_layers(model), shared.head_masks):
                module.masked_key_indices = mask
            self.retained = shared.retained
        else:
            self.engine.compressions += 1
            with attn_implementation(model, comp.attn_implementation):
                if self.capture is not None:
                    cache = comp.compress_captured(model, self.capture, self.cell.ratio)
                else:
                    self.engine.prefills += 1
                    cache = comp.prefill(model, self.prefill_ids, self.cell.ratio)
            if key is not None and type(cache) is DynamicCache:  # quantized caches change as they decode
                self.retained = comp.retained_map(model, cache, self.capture, self.cell.ratio)
                masks = [getattr(m, "masked_key_indices", None) for m in attention_layers(model)]
                layers = [(layer.keys, layer.values) for layer in cache.layers]
                self.engine.shared_contexts[key] = SharedContext(layers, self.retained, masks)
                while len(self.engine.shared_contexts) > SHARED_CONTEXTS_KEPT:
                    self.engine.shared_contexts.popitem(last=False)
        self._lengths = [cache.get_seq_length(i) for i in range(len(cache.layers))]
        self._quantized = [getattr(layer, "_quantized_keys", None) for layer in cache.layers]
        # Layers left with different lengths (PyramidKV budgets, ChunkKV's partial chunk) break the
        # one mask transformers sizes from layer 0: decode on the per-layer causal attention then.
        if len(set(self._lengths)) > 1:
            self.decode_impl = attention.NAME
        self._cache = cache
        return cache

    def cache_after_feed(self) -> Cache | None:
        """The decoding cache cut back to compression + question, so a reference can be
        teacher-forced without feeding the question again; None where that is not exact."""
        extra = self.feed.shape[1]
        if isinstance(self._cache, QuantizedCache):
            # exact only while decoding stayed in the unquantized residual (no re-quantization)
            if any(layer._quantized_keys is not q for layer, q in zip(self._cache.layers, self._quantized)):
                return None
            for layer, length in zip(self._cache.layers, self._lengths):
                layer.keys, layer.values = layer.keys[:, :, :extra], layer.values[:, :, :extra]
                layer.cumulative_length = length + extra
            return self._cache
        if not isinstance(self._cache, DynamicCache):
            return None
        for layer, length in zip(self._cache.layers, self._lengths):
            layer.keys, layer.values = (
                layer.keys[:, :, : length + extra],
                layer.values[:, :, : length + extra],
            )
        return self._cache

    def fresh_cache(self) -> Cache | None:
        """The cache as compression left it (rebuilt from the capture), or None without one."""
        return self.build() if self.capture is not None else None


def run_diagnostic(diagnostic: Diagnostic, context: DiagnosticContext) -> dict[str, Any]:
    """One diagnostic's result with its cost; a failure is an ``error`` result, never a gap."""
    started = time.perf_counter()
    try:
        result = diagnostic.measure(context)
    except Exception as exc:
        result = DiagnosticResult("error", reason=f"{type(exc).__name__}: {exc}")
    result.seconds = time.perf_counter() - started
    out = asdict(result)
    risk = getattr(diagnostic, "risk", None)
    if risk:  # self-describing records: the aggregate needs no plugin to read them
        out["risk"] = dict(risk)
    return out


def setting_dict(setting: Setting) -> dict[str, Any]:
    return {
        "ratio": setting.ratio,
        "retained_share": setting.retained_share,
        "method_parameter": setting.method_parameter,
    }
