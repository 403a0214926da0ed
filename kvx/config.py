"""Hydra configuration: one config group per registry, filled from entry points before composition.

Each registered class is stored as a structured node, so ``press=<name>`` selects any installed
compressor and ``press.<field>=...`` is type-checked against its dataclass. Names are checked
before Hydra runs so that a typo gets a "did you mean" and the list of registered names, not a
model load followed by a stack trace.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from kvx.compressors.base import check_ratio
from kvx.errors import ConfigError
from kvx.registry import RegistryError, registry

#: config group -> registry kind
GROUPS = {"task": "task", "reader": "reader", "press": "compressor"}
#: keys that do not change what a cell computes (excluded from the config hash)
NON_SEMANTIC = {"mlflow", "force", "outputs_dir", "progress", "capture_cache_mb"}


def register_configs() -> None:
    """Store one node per registered, loadable entry in Hydra's ConfigStore."""
    cs = ConfigStore.instance()
    for group, kind in GROUPS.items():
        reg = registry(kind)
        unique = set(reg.names())
        for entry in reg.entries:
            try:
                cls = entry.load()
            except RegistryError:
                continue  # shown as broken by `python -m kvx.plugins`
            if not dataclasses.is_dataclass(cls):
                continue
            # `dist:name` always works; the bare name only when no other distribution claims it
            cs.store(group=group, name=entry.qualified, node=cls, provider=entry.dist)
            if entry.name in unique:
                cs.store(group=group, name=entry.name, node=cls, provider=entry.dist)


_OVERRIDE = re.compile(r"^(?P<key>[a-z_]+)=(?P<value>[^()\[\]{}]*)$")


def check_overrides(argv: list[str]) -> None:
    """Check group choices and ``ratio`` in command-line overrides (plain comma lists only)."""
    for arg in argv:
        m = _OVERRIDE.match(arg)
        if not m:
            continue
        key, values = m["key"], [v.strip() for v in m["value"].split(",")]
        if key in GROUPS:
            for v in values:
                registry(GROUPS[key]).entry(v)  # raises RegistryError with suggestions
        elif key == "ratio":
            for v in values:
                try:
                    number = float(v)
                except ValueError:
                    raise ConfigError(
                        f"ratio={v!r} is not a number; ratio is the fraction removed, in [0, 1)"
                    ) from None
                check_ratio(number)


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


def semantic_config(cfg: DictConfig, names: dict[str, str]) -> dict[str, Any]:
    """What a cell computes: group choices and nodes plus scalar settings."""
    plain = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(plain, dict)
    out = {k: v for k, v in plain.items() if k not in NON_SEMANTIC and k != "hydra"}
    out["choices"] = names
    return out


def config_hash(semantic: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(semantic, sort_keys=True, default=str).encode()).hexdigest()[:16]
