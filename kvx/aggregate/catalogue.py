"""Every table, figure and report section of the aggregate, declared once where it is computed.

A table is a function marked with :func:`table` (or a builder of several with :func:`tables`) whose
parameters name what it needs: the aggregate's inputs (``rows``, ``cells``, ``metrics``, ``options``...,
:data:`INPUTS`), an intermediate marked with :func:`intermediate`, or another table. The runner
(:mod:`kvx.aggregate.run`) resolves them by name in dependency order, each once; the report, ``--only``
and ``--skip``, ``--list`` and the docs' table list all read this one catalogue. Catalogue modules are
found through the ``kvx.aggregate.tables`` entry-point group (figure modules through
``kvx.aggregate.figures``, imported only when figures are drawn), kvx's own included, so an installed
package adds a table, a figure or a section without editing kvx.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any, TypeVar

from kvx.core.registry import RegistryError, registry

#: what the runner gives every builder: the validated rows and what validation knew of them
INPUTS = ("rows", "cells", "metrics", "varying", "contrasts", "validated", "source", "options", "problems")
#: the section of a table declared without one
OTHER = "other"
#: the package whose ``{anchor}.md`` files explain kvx's own sections
PROSE_PACKAGE = "kvx.aggregate.prose"
_MARK = "__kvx_catalogue__"

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Section:
    """A part of the report: its heading, where it stands (``order``), what it says when it has nothing
    (``empty``; an ``optional`` section is left out instead) and the package whose ``<anchor>.md`` holds
    its explanation."""

    anchor: str
    heading: str
    order: float
    empty: str
    optional: bool = False
    prose_package: str = PROSE_PACKAGE


@dataclass(frozen=True)
class Producer:
    """A table (or several: ``names``) or an intermediate, and what it needs by name."""

    names: tuple[str, ...]
    build: Callable[..., Any]
    needs: tuple[str, ...]
    section: str | None = None  # None: an intermediate, never written
    #: column -> display kind ('percent', 'count', 'p', 'float', 'text') where the name rule errs
    display: Mapping[str, str] = field(default_factory=dict)
    shown: Callable[[Any], Any] | None = None  # the part of the table the report shows (CSV: all)
    on_empty: bool = False  # built even when no record was analysed
    background: bool = False  # built in a forked process from the start, collected when reached
    early: bool = False  # built before the others: its figures take longest to draw
    many: bool = False  # ``build`` returns a mapping of some of ``names`` to frames
    family: str = ""  # the entry point that declared it

    @property
    def is_table(self) -> bool:
        return self.section is not None


@dataclass(frozen=True)
class Figure:
    """A figure drawn from one table, one figure per group of ``split`` (drawn in parallel)."""

    key: str
    table: str
    draw: Callable[..., Any]
    split: tuple[str, ...] = ()
    family: str = ""


def _needs(fn: Callable[..., Any]) -> tuple[str, ...]:
    return tuple(
        name
        for name, p in inspect.signature(fn).parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    )


def table(
    name: str,
    section: str,
    *,
    display: Mapping[str, str] | None = None,
    shown: Callable[[Any], Any] | None = None,
    on_empty: bool = False,
    background: bool = False,
    early: bool = False,
) -> Callable[[F], F]:
    """Declare ``fn`` the builder of table ``name`` in ``section``: its parameters name its needs; it
    returns the table, or None when the table does not apply to these records (then it is absent)."""

    def mark(fn: F) -> F:
        producer = Producer(
            (name,), fn, _needs(fn), section, dict(display or {}), shown, on_empty, background, early
        )
        setattr(fn, _MARK, producer)
        return fn

    return mark


def tables(*names: str, section: str, display: Mapping[str, str] | None = None) -> Callable[[F], F]:
    """Declare ``fn`` the builder of several tables computed together; it returns a mapping of some of
    ``names`` to frames (a name left out is absent)."""

    def mark(fn: F) -> F:
        setattr(fn, _MARK, Producer(tuple(names), fn, _needs(fn), section, dict(display or {}), many=True))
        return fn

    return mark


def intermediate(fn: F) -> F:
    """Declare ``fn`` an intermediate named after it: computed once when a table needs it, never written."""
    setattr(fn, _MARK, Producer((fn.__name__,), fn, _needs(fn)))
    return fn


def figure(key: str, table: str, split: Iterable[str] = ()) -> Callable[[F], F]:
    """Declare ``fn(frame, out) -> list[Path]`` the figure ``key`` drawn from ``table``."""

    def mark(fn: F) -> F:
        setattr(fn, _MARK, Figure(key, table, fn, tuple(split)))
        return fn

    return mark


@dataclass(frozen=True)
class Catalogue:
    """The sections in report order, the producers and (when loaded) figures in declaration order."""

    sections: tuple[Section, ...]
    producers: tuple[Producer, ...]
    figures: tuple[Figure, ...] = ()
    broken: tuple[str, ...] = ()  # packages whose modules failed to import: left out, and why

    def tables(self) -> list[Producer]:
        """Table producers in report order: by section (``sections`` are in report order), then as
        declared; tables in ``OTHER`` last."""
        order = {s.anchor: i for i, s in enumerate(self.sections)}
        found = [p for p in self.producers if p.is_table]
        return sorted(found, key=lambda p: order.get(p.section or OTHER, len(order)))

    def table_names(self) -> list[str]:
        return [name for p in self.tables() for name in p.names]

    def producer(self, name: str) -> Producer:
        """What builds ``name``; KeyError when nothing declares it (the aggregate's inputs included)."""
        found = next((p for p in self.producers if name in p.names), None)
        if found is None:
            raise KeyError(f"aggregate catalogue: nothing declares {name!r}")
        return found

    def in_section(self, anchor: str) -> list[str]:
        return [name for p in self.tables() if p.section == anchor for name in p.names]

    def figures_of(self, table_name: str) -> list[Figure]:
        return [f for f in self.figures if f.table == table_name]


def _members(module: ModuleType, family: str) -> Iterable[Section | Producer | Figure]:
    for value in vars(module).values():
        if isinstance(value, Section):
            yield value
        mark = getattr(value, _MARK, None)
        if isinstance(mark, Producer | Figure) and getattr(value, "__module__", None) == module.__name__:
            yield replace(mark, family=family)


def from_modules(
    modules: Mapping[str, ModuleType], figure_modules: Mapping[str, ModuleType] = {}
) -> Catalogue:
    """The catalogue of ``modules`` (family name -> module), checked: every name declared once and every
    need declared, so a plugin's mistake is one clear error before any record is read."""
    sections: list[Section] = []
    producers: list[Producer] = []
    figures: list[Figure] = []
    for family, module in modules.items():
        for member in _members(module, family):
            if isinstance(member, Section):
                sections.append(member)
            elif isinstance(member, Producer):
                producers.append(member)
    for family, module in figure_modules.items():
        figures.extend(m for m in _members(module, family) if isinstance(m, Figure))
    in_order = sorted(sections, key=lambda s: s.order)  # stable: equal orders stay as declared
    catalogue = Catalogue(tuple(in_order), tuple(producers), tuple(figures))
    _check(catalogue)
    return catalogue


def _check(catalogue: Catalogue) -> None:
    declared: dict[str, str] = {name: "kvx.aggregate.run" for name in INPUTS}
    for producer in catalogue.producers:
        for name in producer.names:
            if name in declared:
                raise ValueError(
                    f"aggregate catalogue: {name!r} is declared twice "
                    f"({declared[name]} and {producer.family})"
                )
            declared[name] = producer.family
    anchors = {OTHER}
    for section in catalogue.sections:
        if section.anchor in anchors:
            raise ValueError(f"aggregate catalogue: section {section.anchor!r} is declared twice")
        anchors.add(section.anchor)
    for producer in catalogue.producers:
        missing = [need for need in producer.needs if need not in declared]
        if missing:
            raise ValueError(
                f"aggregate catalogue: {producer.names[0]!r} ({producer.family}) needs {', '.join(missing)}, "
                "which nothing declares"
            )
        if producer.section is not None and producer.section not in anchors:
            raise ValueError(
                f"aggregate catalogue: table {producer.names[0]!r} ({producer.family}) is in section "
                f"{producer.section!r}, which nothing declares"
            )
    tables = set(catalogue.table_names())
    for section in catalogue.sections:  # an optional section writes {anchor}.md beside the tables
        if section.optional and section.anchor in tables:
            raise ValueError(f"aggregate catalogue: optional section {section.anchor!r} has a table's name")
    for fig in catalogue.figures:
        if fig.table not in tables:
            raise ValueError(f"aggregate figure {fig.key!r} ({fig.family}) draws {fig.table!r}, not a table")


def _load(kind: str, distributions: Collection[str] | None) -> tuple[dict[str, ModuleType], list[str]]:
    """The modules registered as ``kind`` (kvx's registry: ``KVX_DISABLE_PLUGINS`` and plugins that
    fail to import behave as for presses), each under its entry point's name, and a line for each
    broken one: a broken package's tables are left out and said, never the aggregate's end."""
    loaded, broken = {}, []
    found = registry(kind)
    for entry in sorted(found.entries, key=lambda e: (e.name, e.dist)):
        if distributions is not None and entry.dist not in distributions:
            continue
        try:
            module = entry.load()
        except RegistryError as exc:
            broken.append(f"{exc}; its tables and figures are left out")
            continue
        if not isinstance(module, ModuleType):
            raise ValueError(
                f"entry point {entry.group}:{entry.name} = {entry.entry_point.value} must name a module"
            )
        loaded[found.display_name(entry)] = module
    return loaded, broken


def load(figures: bool = False, distributions: Collection[str] | None = None) -> Catalogue:
    """The catalogue of every installed package, or of those ``distributions`` (kvx's own docs: "kvx");
    figures too when asked (that imports matplotlib). ``broken`` says which packages failed to import."""
    tables, broken = _load("aggregate_tables", distributions)
    drawn, broken_figures = _load("aggregate_figures", distributions) if figures else ({}, [])
    return replace(from_modules(tables, drawn), broken=(*broken, *broken_figures))
