"""One identity per cell: everything that can change an answer, and nothing that cannot.

A cell is task x reader x transform x compressor x setting x seed x split size x decoding budget.
Its identity keys the record keys, the finished-cell lookup, the FullCache control group, the
captured prefills and the aggregate's matrix rows, so two settings can never share a cell and one
setting (``snapkv`` and ``kvx:snapkv``; ``max_new_tokens`` null and the task's own budget) can
never be two cells. The identity is plain JSON: records carry its flat form, so the aggregate
shows the fields that vary across a sweep without importing any plugin.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any

#: flat fields that the matrix already shows in its own columns (or pools over: seeds)
SHOWN = ("task", "reader", "press", "setting.kind", "setting.value", "seed")
#: flat-field prefixes that name a plugin: their fields are compared within one plugin only
PLUGINS = ("task", "reader", "transform", "press")
#: split fields whose defaults come from the task: compared within one task (P2's 96 decoding
#: tokens next to P3's 128 is not a max_new_tokens sweep)
TASK_SCOPED = ("n_sources", "context_tokens", "max_new_tokens")


def digest(payload: Any, length: int = 16) -> str:
    """sha256 of canonical JSON (sorted keys), cut to ``length`` hex digits."""
    text = _canonical(payload)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


#: ``dataclasses.field(metadata=WHEN_SET)``: a field added to a plugin after stores exist, left out of
#: the identity while it holds its default, so the cells that never set it keep their ids and controls
WHEN_SET = {"identity": "when_set"}


def when_set(stored: Any) -> dict[str, Any]:
    """``dataclasses.field(metadata=when_set(value))``: a ``WHEN_SET`` field whose stored cells all
    meant ``value``, which is not its default (the default is new behaviour): left out of the
    identity while it holds ``value``, so those cells keep their ids and the new default gets its own."""
    return {**WHEN_SET, "stored": stored}


#: ``dataclasses.field(metadata=NEVER)``: a field that cannot change an answer (a timeout, a rate limit,
#: the name of a key's variable): never part of the identity
NEVER = {"identity": "never"}


def fields_of(obj: Any) -> dict[str, Any]:
    """A plugin dataclass's configured fields (private ``_name`` fields are state, not config; a
    ``WHEN_SET`` field only when it differs from its default, or from ``when_set``'s value)."""
    if obj is None:
        return {}
    return {
        f.name: getattr(obj, f.name)
        for f in dataclasses.fields(obj)
        if not f.name.startswith("_")
        and f.metadata.get("identity") != "never"
        and not (f.metadata.get("identity") == "when_set" and getattr(obj, f.name) == _stored(f))
    }


def _stored(f: dataclasses.Field) -> Any:
    """The value a ``WHEN_SET`` field's stored cells meant: ``when_set``'s, else its default."""
    return f.metadata["stored"] if "stored" in f.metadata else _default(f)


def changed_fields(obj: Any) -> dict[str, Any]:
    """The identity fields (``fields_of``) that differ from their defaults, compared as the identity
    hashes them: what a label shows so that two cells of one plugin never read alike."""
    defaults = {f.name: _default(f) for f in dataclasses.fields(obj)}
    return {k: v for k, v in fields_of(obj).items() if _canonical(v) != _canonical(defaults[k])}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _default(f: dataclasses.Field) -> Any:
    """A field's default, from its factory when it has one."""
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


@dataclass(frozen=True)
class SettingSpec:
    """How much a compressor keeps: a kvpress ratio (fraction removed) or a fixed token budget."""

    kind: str  # "ratio" | "budget_tokens" | "none" (the compressor keeps everything whatever is asked)
    value: float | int | None

    def label(self) -> str:
        if self.kind == "ratio":
            return f"{self.value:g}"
        if self.kind == "budget_tokens":
            return f"{self.value} tok"
        return "-"


def component(name: str, obj: Any, **extra: Any) -> dict[str, Any]:
    """A plugin's identity: canonical registry name, its fields and anything resolved about it."""
    return {"name": name, "fields": fields_of(obj), **extra}


@dataclass(frozen=True)
class CellIdentity:
    """The semantic description of a cell and its hash.

    ``split`` groups the cells that share FullCache controls (task, reader, seed, split size, context
    size, decoding budget): every compressor, transform and setting of that split pairs with one
    control per source. The control itself is stored by ``answer_fields`` (``kvx.stores.controls``).
    """

    task: dict[str, Any]
    reader: dict[str, Any]
    transform: dict[str, Any]
    compressor: dict[str, Any]
    setting: SettingSpec
    seed: int
    n_sources: int
    context_tokens: int
    max_new_tokens: int
    #: ``kvx.core.query.stored``: false, true (the ``prompt`` mode, as stores before the modes had names
    #: hold it) or "question"; not in the split: every mode pairs with the same FullCache control
    query_aware: bool | str
    #: the compressor as an earlier kvx hashed this same setting (a renamed press, a wrapper over the
    #: base it was once fixed to): the id stays the stored one, the flat fields say today's names
    stored_compressor: dict[str, Any] | None = None

    def split_fields(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "reader": self.reader,
            "seed": self.seed,
            "n_sources": self.n_sources,
            "context_tokens": self.context_tokens,
            "max_new_tokens": self.max_new_tokens,
        }

    def answer_fields(self) -> dict[str, Any]:
        """What, beside the source and the prompt the reader rendered of it, determines a FullCache
        answer: the task (its fields and scorer version score it), the reader and the decoding
        budget. The seed, the split size and the context size only choose and size the sources,
        whose content the control store keys by instead, so a source answered in one split is
        answered in every split that draws it."""
        return {"task": self.task, "reader": self.reader, "max_new_tokens": self.max_new_tokens}

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.split_fields(),
            "transform": self.transform,
            "compressor": self.stored_compressor or self.compressor,
            "setting": dataclasses.asdict(self.setting),
            "query_aware": self.query_aware,
        }

    @property
    def id(self) -> str:
        return digest(self.as_dict())

    @property
    def split(self) -> str:
        """Identity of the FullCache control group (the ``split`` of records and control runs)."""
        return digest(self.split_fields(), 64)

    @property
    def split_cache_key(self) -> str:
        """Sources depend on the task, the seed, the size and the reader's tokenizer only."""
        parts = {k: v for k, v in self.split_fields().items() if k != "max_new_tokens"}
        return digest(parts)

    def flat(self) -> dict[str, Any]:
        """``task``, ``task.<field>``, ``reader.<field>``, ``press.<field>``, ``setting.kind``...:
        the flat form records carry and the aggregate compares across a sweep."""
        out: dict[str, Any] = {}
        for prefix, part in (
            ("task", self.task),
            ("reader", self.reader),
            ("transform", self.transform),
            ("press", self.compressor),
        ):
            _flatten(out, prefix, part)
        out["setting.kind"] = self.setting.kind
        out["setting.value"] = self.setting.value
        for key in ("seed", "n_sources", "context_tokens", "max_new_tokens", "query_aware"):
            out[key] = getattr(self, key)
        return out


def _flatten(out: dict[str, Any], prefix: str, part: dict[str, Any]) -> None:
    """``prefix`` is the part's name, ``prefix.<field>`` its fields; a nested part (a wrapper's base
    press: ``{"name", "fields"}``) the same one level down (``press.base``, ``press.base.window_size``)."""
    out[prefix] = part["name"]
    for key, value in part.items():
        if key == "name":
            continue
        if key != "fields":
            out[f"{prefix}.{key}"] = _scalar(value)
            continue
        for name, field_value in value.items():
            if isinstance(field_value, dict) and set(field_value) == {"name", "fields"}:
                _flatten(out, f"{prefix}.{name}", field_value)
            else:
                out[f"{prefix}.{name}"] = _scalar(field_value)


def _scalar(value: Any) -> Any:
    """Flat fields are JSON scalars; lists and mappings become their canonical JSON text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def varying(cells: dict[str, dict[str, Any]]) -> list[str]:
    """Flat fields whose value differs between the given cells (id -> flat fields), in a stable
    order; fields the matrix already shows are left out. A plugin's field (``press.window_size``)
    varies only between cells of that same plugin: SnapKV next to TOVA is not a window sweep; split
    sizes and decoding budgets vary only within one task."""
    keys: list[str] = []
    for flat in cells.values():
        keys.extend(k for k in flat if k not in keys)
    out = []
    for key in keys:
        if key in SHOWN:
            continue
        owner = key.split(".", 1)[0] if "." in key else ("task" if key in TASK_SCOPED else "")
        scoped = owner in PLUGINS
        groups: dict[str, set[str]] = {}
        for flat in cells.values():
            group = json.dumps(flat.get(owner)) if scoped else ""
            groups.setdefault(group, set()).add(json.dumps(flat.get(key), sort_keys=True))
        if any(len(values) > 1 for values in groups.values()):
            out.append(key)
    return out
