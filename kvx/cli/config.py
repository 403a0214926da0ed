"""Hydra configuration: one config group per registry, filled from entry points before composition.

Each registered class is stored as a structured node, so ``press=<name>`` selects any installed
compressor and ``press.<field>=...`` is type-checked against its dataclass. Names and values are
checked before Hydra runs (``kvx.cli.preflight``) so that a typo gets a "did you mean" and the list of
registered names, not a model load followed by a stack trace.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from kvx.core.registry import BUILTIN_DIST, RegistryError, registry

#: config group -> registry kind
GROUPS = {
    "task": "task",
    "reader": "reader",
    "press": "compressor",
    "transform": "transform",
    "turn_selector": "turn_selector",
    "judge": "judge",
}


#: group -> names typed for it (on the command line or in the config's defaults); None: every name
Wanted = Mapping[str, Collection[str] | None]


def share_config_store() -> None:
    """Copies of Hydra's config repository share the live ConfigStore instead of cloning it.

    Hydra 1.3 deep-copies its config repository for every ``CachingConfigRepository`` (once per
    compose, per preflight job, and per config group ``--help`` lists: 75 times for kvx's
    ``--help``). The repository's structured source holds ``ConfigStore.instance()``, so each copy
    cloned every stored node, kvx's plugin nodes included: ~20 ms a copy, 1.4 s of ``--help``.
    Hydra's own fix (facebookresearch/hydra#2928, in no 1.3.x release) makes that source fetch
    ``ConfigStore.instance()`` on each use, so a copy reads the live store; passing the store in
    the deepcopy memo does the same. The copy is made only so that ``initialize_sources`` cannot
    touch the original's source list; the store is never written through it, and
    ``ConfigStore.load`` deep-copies each node it hands out. Only the pinned Hydra 1.3 is patched.
    """
    import hydra
    from hydra._internal import config_repository

    caching = config_repository.CachingConfigRepository
    if not hydra.__version__.startswith("1.3.") or getattr(caching, "_kvx_shares_store", False):
        return

    def __init__(self: Any, delegate: Any) -> None:
        store = ConfigStore.instance()
        self.delegate = copy.deepcopy(delegate, {id(store): store})
        self.cache = {}

    caching.__init__ = __init__
    caching._kvx_shares_store = True


share_config_store()


def register_configs(wanted: Wanted | None = None) -> None:
    """Store one node per registered, loadable entry in Hydra's ConfigStore, under its display name
    (``python -m kvx --help`` lists each option once).

    With ``wanted``, third-party entries load only when named there, so a heavy or broken plugin
    nobody asked for costs nothing; built-ins always load (their modules import no framework), and
    a ``dist:name`` typed for an entry is stored too. Without it, everything loads (``--help``).
    """
    cs = ConfigStore.instance()
    for group, kind in GROUPS.items():
        reg = registry(kind)
        typed = None if wanted is None else wanted.get(group, ())
        for entry in reg.entries:
            chosen = typed is None or reg.display_name(entry) in typed or entry.qualified in typed
            if entry.dist != BUILTIN_DIST and not chosen:
                continue
            try:
                cls = entry.load()
            except RegistryError:
                continue  # shown as broken by `python -m kvx.plugins`, and by the preflight if asked for
            if not dataclasses.is_dataclass(cls):
                continue
            cs.store(group=group, name=reg.display_name(entry), node=cls, provider=entry.dist)
            if typed is not None and entry.qualified in typed:
                cs.store(group=group, name=entry.qualified, node=cls, provider=entry.dist)


def instantiate(cfg: DictConfig, group: str) -> Any:
    """The dataclass object configured under ``cfg.<group>``."""
    return OmegaConf.to_object(cfg[group])


def choices(cfg: DictConfig) -> dict[str, str]:
    """Chosen option name per group (from Hydra's runtime, or the ``name`` keys when absent)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        runtime = HydraConfig.get().runtime.choices
        return {g: str(runtime[g]) for g in GROUPS}
    except ValueError:
        return {g: str(cfg.get(f"{g}_name", "")) for g in GROUPS}
