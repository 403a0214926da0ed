"""What the pipeline works on: a cell's resolved settings, what its records share (its plan), and one
source of a cell on its way from the setting's resolution to its answer (a job)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvx.compressors.base import Compressor, label
from kvx.core.identity import CellIdentity, SettingSpec, component, fields_of
from kvx.core.query import OFF, query_mode, stored
from kvx.core.records import SUPPORTED, Record, versions
from kvx.core.setting import Setting
from kvx.core.source import Source
from kvx.diagnostics.base import Diagnostic
from kvx.stores.tracing import Tracer
from kvx.tasks.base import Task
from kvx.transforms.base import Transform
from kvx.transforms.none import Identity

if TYPE_CHECKING:  # a cell is declared (planned, checked) without loading a framework
    from transformers import Cache

    from kvx.modeling.compressed import CompressedRun
    from kvx.modeling.reader import LoadedReader, Prompt
    from kvx.pipeline.transform import Transformed


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
    #: a ``kvx.core.query`` mode: false, prompt or question (True and False, as configs before the
    #: modes had names say it, are read as prompt and false)
    query_aware: str = OFF
    #: (name, diagnostic) in run order; likelihood before decoding, which reads its gold ranks
    diagnostics: list[tuple[str, Diagnostic]] = field(default_factory=list)
    #: keep this many context tokens instead of removing ``ratio`` of them
    budget_tokens: int | None = None
    transform_name: str = "none"
    transform: Transform = field(default_factory=Identity)

    def __post_init__(self) -> None:
        self.query_aware = query_mode(self.query_aware)

    def spec(self) -> SettingSpec:
        return self.compressor.setting_spec(self.ratio, self.budget_tokens)

    def label(self) -> str:
        """How logs, progress bars and run names show the cell: ``snapkv@0.5``, ``hqq[bits=4]@-``,
        ``turns:recency[fraction=0.3]+snapkv[window_size=32]@0.5``. The compressor's identity fields
        that differ from their defaults (and ``query_aware``) are shown, so two cells of a sweep never
        share a label while the defaults keep it short."""
        mode = {"query_aware": self.query_aware} if self.query_aware != OFF else {}
        compressor = f"{label(self.compressor, self.press_name, **mode)}@{self.spec().label()}"
        if self.transform.identity:
            return compressor
        shown = ",".join(f"{k}={v}" for k, v in fields_of(self.transform).items() if k != "options")
        return f"{self.transform_name}[{shown}]+{compressor}"

    def identity(self, reader: dict) -> CellIdentity:
        """This cell's identity on a reader (``LoadedReader.identity`` or ``reader_identity``)."""
        return CellIdentity(
            task=component(self.task_name, self.task, scorer_version=type(self.task).scorer_version),
            reader=reader,
            transform=component(self.transform_name, self.transform, **self.transform.fingerprint()),
            compressor={"name": self.press_name, "fields": self.compressor.identity_fields()},
            stored_compressor=self.compressor.stored_identity(self.press_name),
            setting=self.spec(),
            seed=self.seed,
            n_sources=self.n_sources,
            context_tokens=self.context_tokens,
            max_new_tokens=self.max_new_tokens,
            query_aware=stored(self.query_aware),
        )


@dataclass
class Plan:
    """What every record of a cell shares: its identity, base fields and key tail."""

    identity: CellIdentity
    base: dict
    tail: str

    @classmethod
    def of(cls, cell: Cell, reader: LoadedReader, config_hash: str | None) -> Plan:
        identity = cell.identity(reader.identity)
        base = {
            "task": cell.task_name,
            "reader": reader.label or reader.name,
            "reader_family": reader.family,
            "prompt_format": reader.prompt_format,
            "model_revision": reader.revision,
            "compressor": cell.press_name,
            "seed": cell.seed,
            "query_aware": stored(cell.query_aware),
            "split": identity.split,
            "config_hash": config_hash or identity.id,
            "cell": {"id": identity.id, "fields": identity.flat()},
            "versions": versions(),
            "contrast": dict(type(cell.task).contrast) or None,
            "task_family": type(cell.task).family,
        }
        # key = task/<source>/reader@revision/compressor/setting/seed/cell id: unique per source and cell
        tail = "/".join(
            [f"{base['reader']}@{reader.revision}", cell.press_name, setting_key(identity.setting)]
            + [f"seed={cell.seed}", identity.id]
        )
        return cls(identity, base, tail)

    def key(self, cell: Cell, source: Source) -> str:
        return f"{cell.task_name}/{source.id}/{self.tail}"


@dataclass
class Member:
    """A cell taking part in one source's run, with the tracer its stages report to."""

    cell: Cell
    plan: Plan
    tracer: Tracer = field(default_factory=Tracer)


@dataclass
class Job:
    """One cell's source between the setting's resolution and its answer."""

    cell: Cell
    identity: CellIdentity
    record: Record
    setting: Setting
    source: Source  # what the compressor saw (transformed, when a transform ran)
    prompt: Prompt
    transformed: Transformed | None
    tracer: Tracer
    cache: Cache | None = None
    run: CompressedRun | None = None
    masks: list | None = None  # AdaKV's per-head masks its compression set, for its own decode
    cost: dict | None = None  # the compressed cache's bytes and build time (kvx.modeling.costs)

    @property
    def ok(self) -> bool:
        return self.record.status == SUPPORTED and not self.record.reason


def setting_key(spec: SettingSpec) -> str:
    if spec.kind == "ratio":
        return f"ratio={spec.value}"
    if spec.kind == "budget_tokens":
        return f"budget_tokens={spec.value}"
    return "setting=none"


def setting_dict(setting: Setting, spec: SettingSpec) -> dict:
    return {
        "kind": spec.kind,
        "value": spec.value,
        "ratio": setting.ratio,
        "retained_share": setting.retained_share,
        "method_parameter": setting.method_parameter,
    }
