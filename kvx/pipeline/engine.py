"""The run engine schedules cells: one cell = task split x reader x transform x compressor x setting x seed.

It plans each cell (identity, record fields), resumes from spooled records, and runs the cells that
share a control split source by source through ``kvx.pipeline.source.run_source``, the one path
every source takes. It owns what the stages reuse across cells and hands it to them: the FullCache
control store, the artifact store, captured prefills, shared compressed contexts and FullCache-side
memos. Failures on one source become an ``error`` record; settings a compressor cannot honour become
``unsupported`` records. Neither is ever scored.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import torch
from tqdm.auto import tqdm

from kvx.core.errors import ConfigError
from kvx.core.lru import ByteLRU
from kvx.core.records import Record, validate
from kvx.core.source import Source
from kvx.diagnostics.base import check_order
from kvx.modeling import attention
from kvx.modeling.capture import CaptureCache
from kvx.modeling.compressed import Caches
from kvx.modeling.heap import trim_memory
from kvx.modeling.reader import LoadedReader
from kvx.pipeline.cell import Cell, Member, Plan
from kvx.pipeline.control import Controls
from kvx.pipeline.rediagnose import Answered, rediagnose_source
from kvx.pipeline.served import ServedReader, run_served
from kvx.pipeline.source import Stages, run_source
from kvx.stores.artifacts import ArtifactStore
from kvx.stores.controls import ControlStore
from kvx.stores.spool import Spool
from kvx.stores.tracing import Tracer, sampled


class Engine:
    """Process-wide state shared by every cell a process runs."""

    def __init__(
        self, outputs_dir: Path, capture_cache_bytes: int, memo_bytes: int = 2**30, decode_budget: int = 0
    ) -> None:
        attention.register()
        #: served readers' replies, by request (kvx.modeling.endpoint)
        self.responses = outputs_dir / "responses"
        self.controls = ControlStore(outputs_dir / "controls")
        self.partial = outputs_dir / "partial"  # spooled records of cells in progress (kvx.stores.spool)
        self.resumed: Counter[str] = Counter()  # per cell id: records reused from its spool
        #: per cell id: records whose recorded answers stood, only their diagnostics run again
        self.rediagnosed: Counter[str] = Counter()
        self.caches = Caches(CaptureCache(capture_cache_bytes), ByteLRU(memo_bytes))
        #: text-transform outputs, content-addressed: computed once per (row, transform config)
        artifacts = ArtifactStore(outputs_dir / "artifacts")
        self.stages = Stages(self.caches, Controls(self.controls, self.caches), artifacts, decode_budget)
        self._splits: dict[str, list[Source]] = {}

    @property
    def decodes(self) -> dict[str, Counter[str]]:
        """Per cell id: how its compressed caches were decoded ("batched", "alone: <why>") -> count."""
        return self.stages.decodes

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
        answered: list[Answered | None] | None = None,
    ) -> list[list[Record]]:
        """Every cell's records, source by source: cells sharing a control split run together, so
        one source's prefill is in memory at a time, serves every cell, and the FullCache control and
        the compressed caches decode in one batch. Sampled (traced) sources run cell by cell, so
        each trace keeps its own spans. Each finished source is spooled (``kvx.stores.spool``): a run
        that was stopped resumes at the sources it reached (unless ``resume`` is false).
        ``release`` (default: with more than one cell) drops each source's capture once it is
        done instead of keeping it in the LRU for cells a caller runs later. ``answered``: per cell, a
        finished run's records whose answers stand (``kvx.pipeline.rediagnose``): those sources run only
        their diagnostics, never a decode."""
        for cell in cells:  # a cell built in code skips the CLI's check: refuse it before any source runs
            check_order(cell.diagnostics)
        release = len(cells) > 1 if release is None else release
        hashes = config_hashes or [None] * len(cells)
        tracers = tracers or [Tracer() for _ in cells]
        answered = answered or [None] * len(cells)
        plans = [Plan.of(c, reader, h) for c, h in zip(cells, hashes)]
        spools = [Spool(self.partial, p.identity.id, p.base["config_hash"]) for p in plans]
        if not resume:
            for spool in spools:
                spool.remove()
        spooled = [spool.load() for spool in spools]
        out: list[list[Record]] = [[] for _ in cells]
        groups = _by_split(plans)
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
                if ready := [c for c in todo if self._recorded(answered[c], plans[c].key(cells[c], source))]:
                    again = rediagnose_source(
                        self.stages,
                        reader,
                        [Member(cells[c], plans[c], tracers[c]) for c in ready],
                        source,
                        [answered[c].records[plans[c].key(cells[c], source)] for c in ready],  # type: ignore[union-attr]
                        [answered[c].kept for c in ready],  # type: ignore[union-attr]
                        release and len(ready) == len(todo),  # else the others reuse its prefill
                    )
                    for c, record in zip(ready, again, strict=True):
                        if record is not None:
                            done[c] = record
                            self.rediagnosed[plans[c].identity.id] += 1
                    todo = [c for c in todo if done[c] is None]
                if any(sampled(tracers[c].sample, source.id) for c in todo):  # one trace per cell
                    done.update(
                        {
                            c: self._traced(Member(cells[c], plans[c], tracers[c]), reader, source)
                            for c in todo
                        }
                    )
                elif todo:
                    running = [Member(cells[c], plans[c]) for c in todo]
                    keep_shared = later[source.context] > 0
                    done.update(
                        zip(todo, run_source(self.stages, reader, running, source, release, keep_shared))
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

    @staticmethod
    def _recorded(answered: Answered | None, key: str) -> bool:
        return answered is not None and key in answered.records

    def run_served(
        self,
        cells: list[Cell],
        reader: ServedReader,
        progress: bool = True,
        config_hashes: list[str | None] | None = None,
    ) -> list[list[Record]]:
        """Every cell's records on a served reader (``kvx.pipeline.served``), a split at a time; what
        a stopped run had asked is replayed from the response cache."""
        hashes = config_hashes or [None] * len(cells)
        plans = [Plan.of(c, reader, h) for c, h in zip(cells, hashes)]  # type: ignore[arg-type]
        out: list[list[Record]] = [[] for _ in cells]
        groups = _by_split(plans)
        for members in groups.values():
            sources = self.sources(cells[members[0]], reader)  # type: ignore[arg-type]
            done = run_served(
                [cells[c] for c in members],
                [plans[c] for c in members],
                sources,
                reader,
                self.stages.artifacts,
                self.controls,
                progress,
            )
            for c, records in zip(members, done):
                for record in records:
                    validate(record.to_dict())
                out[c] = records
        return out

    def _traced(self, member: Member, reader: LoadedReader, source: Source) -> Record:
        """One cell's source on the one path, inside its trace's root span."""
        started = time.perf_counter()
        cell, tracer = member.cell, member.tracer
        inputs = {"source_id": source.id, "question": source.question, "references": list(source.answers)}
        with tracer.source(f"{cell.label()} | {source.id}", source.id, inputs) as root:
            root.set_attribute("kvx.cell_id", member.plan.identity.id)
            (record,) = run_source(self.stages, reader, [member], source)
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


def _by_split(plans: list[Plan]) -> dict[str, list[int]]:
    """The cells' indices grouped by control split (cells of one split share their sources)."""
    groups: dict[str, list[int]] = {}
    for i, plan in enumerate(plans):
        groups.setdefault(plan.identity.split, []).append(i)
    return groups
