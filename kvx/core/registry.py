"""Entry-point registries: the only way tasks, compressors, readers, turn selectors, diagnostics, text
transforms, judges and the aggregate's table and figure modules reach kvx, built-ins included, so a
third-party package is a peer of kvx's own code.

Entries load lazily and one at a time: a plugin whose import fails is recorded as broken and
shown by ``python -m kvx.plugins --check`` without taking the others down (the plain listing imports
nothing). Two distributions that
register the same name are both kept under ``dist:name``. kvx's own built-in keeps the bare name
(so a plugin cannot change what ``press=snapkv`` or the default config means); between two
third-party distributions the bare name is ambiguous and asking for it is an error naming both.
"""

from __future__ import annotations

import contextlib
import difflib
import os
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any

GROUPS: dict[str, str] = {
    "task": "kvx.tasks",
    "compressor": "kvx.compressors",
    "reader": "kvx.readers",
    "turn_selector": "kvx.turn_selectors",
    "diagnostic": "kvx.diagnostics",
    "transform": "kvx.transforms",
    "judge": "kvx.judges",
    "aggregate_tables": "kvx.aggregate.tables",  # modules of tables (kvx.aggregate.catalogue)
    "aggregate_figures": "kvx.aggregate.figures",  # modules of figures, imported only to draw
}
BUILTIN_DIST = "kvx"
DISABLE_ENV = "KVX_DISABLE_PLUGINS"


class RegistryError(ValueError):
    """A name that is not registered, ambiguous or broken. Raised before any model loads."""


@dataclass
class Entry:
    """One registered name: where it comes from and, once loaded, the object or the error."""

    name: str
    group: str
    dist: str
    version: str
    entry_point: EntryPoint
    _obj: Any = None
    error: str | None = None
    loaded: bool = False

    @property
    def qualified(self) -> str:
        return f"{self.dist}:{self.name}"

    def load(self) -> Any:
        if not self.loaded:
            self.loaded = True
            try:
                self._obj = self.entry_point.load()
            except Exception as exc:  # a broken plugin must not break the others
                self.error = f"{type(exc).__name__}: {exc}"
        if self.error:
            raise RegistryError(f"{self.group} '{self.name}' from {self.qualified} is broken: {self.error}")
        return self._obj

    @property
    def status(self) -> str:
        if not self.loaded:
            with contextlib.suppress(RegistryError):
                self.load()
        return "broken" if self.error else "ok"


@dataclass
class Registry:
    """Entries of one group, keyed by bare name (unique) and by ``dist:name`` (always)."""

    kind: str
    group: str
    entries: list[Entry] = field(default_factory=list)

    def names(self) -> list[str]:
        """Names a user can type, one per entry: bare for built-ins and unique names, ``dist:name``
        for a plugin that shares its name with a built-in or another plugin."""
        return sorted(self.display_name(e) for e in self.entries)

    def display_name(self, entry: Entry) -> str:
        return entry.name if entry.dist == BUILTIN_DIST or not self.collisions(entry) else entry.qualified

    def collisions(self, entry: Entry) -> list[Entry]:
        """The other entries registered under the same bare name."""
        return [e for e in self.entries if e.name == entry.name and e is not entry]

    def entry(self, name: str) -> Entry:
        if ":" in name:
            matches = [e for e in self.entries if e.qualified == name]
        else:
            matches = [e for e in self.entries if e.name == name]
            matches = [e for e in matches if e.dist == BUILTIN_DIST] or matches  # a built-in wins
        if len(matches) > 1:
            dists = ", ".join(e.qualified for e in matches)
            raise RegistryError(
                f"{self.kind} '{name}' is registered by more than one distribution ({dists}); "
                f"choose one as {'press' if self.kind == 'compressor' else self.kind}=<dist>:{name}"
            )
        if not matches:
            raise RegistryError(unknown_message(self.kind, name, self.names()))
        return matches[0]

    def get(self, name: str) -> Any:
        return self.entry(name).load()

    def name_of(self, cls: type) -> str:
        """The name a user types for the entry that registers ``cls`` (a built-in's bare name), found
        from the entry points' values, so nothing is imported. RegistryError if none registers it."""
        value = f"{cls.__module__}:{cls.__qualname__}"
        matches = [e for e in self.entries if e.entry_point.value.replace(" ", "") == value]
        matches = [e for e in matches if e.dist == BUILTIN_DIST] or matches
        if not matches:
            raise RegistryError(f"no registered {self.kind} is {value}")
        return self.display_name(matches[0])


def unknown_message(kind: str, name: str, known: list[str]) -> str:
    guess = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    hint = f" Did you mean '{guess[0]}'?" if guess else ""
    return f"Unknown {kind} '{name}'.{hint} Registered {kind}s: {', '.join(known) or '(none)'}."


def _dist_of(ep: EntryPoint) -> tuple[str, str]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "unknown", "unknown"
    metadata = dist.metadata  # parsed on each access
    return metadata["Name"], metadata["Version"]


def _discover(kind: str, group: str) -> Registry:
    builtins_only = os.environ.get(DISABLE_ENV, "").lower() in {"1", "true", "yes"}
    reg = Registry(kind=kind, group=group)
    seen: set[tuple[str, str]] = set()
    # one metadata parse per distribution, not two per entry point (~1.5 ms each: kvx has 60+)
    dists: dict[int, tuple[str, str]] = {}
    for ep in entry_points(group=group):
        key = id(getattr(ep, "dist", None))
        if key not in dists:
            dists[key] = _dist_of(ep)
        dist, version = dists[key]
        if builtins_only and dist != BUILTIN_DIST:
            continue
        if (dist, ep.name) in seen:  # the same distribution visible twice on sys.path
            continue
        seen.add((dist, ep.name))
        reg.entries.append(Entry(ep.name, group, dist, version, ep))
    return reg


_REGISTRIES: dict[str, Registry] = {}


def registry(kind: str) -> Registry:
    """The registry of one kind (``task``, ``compressor``, ...), discovered once per process."""
    if kind not in GROUPS:
        raise KeyError(f"unknown registry kind {kind!r}; kinds are {sorted(GROUPS)}")
    if kind not in _REGISTRIES:
        _REGISTRIES[kind] = _discover(kind, GROUPS[kind])
    return _REGISTRIES[kind]


def canonical(kind: str, name: str) -> str:
    """One identity per entry however it was typed: ``snapkv`` and ``kvx:snapkv`` are the built-in
    ``snapkv``; a third-party entry is always its ``dist:name``. RegistryError like ``entry()``."""
    entry = registry(kind).entry(name)
    return entry.name if entry.dist == BUILTIN_DIST else entry.qualified


def reset() -> None:
    """Forget discovered entries (tests that install or disable plugins call this)."""
    _REGISTRIES.clear()


def plugin_versions() -> dict[str, str]:
    """Distribution -> version of every distribution that registered anything: logged with runs."""
    out: dict[str, str] = {}
    for kind in GROUPS:
        for e in registry(kind).entries:
            out[e.dist] = e.version
    return dict(sorted(out.items()))
