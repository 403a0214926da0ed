"""A composed config as a cell: every setting resolved and checked, no model loaded.

The sweeper builds every cell of a sweep this way before anything is written, and a job builds its own
the same way, so both accept exactly the same configs. A plugin option is named by what it is, not by
how it was chosen: ``press=mypress``, a YAML option that extends ``snapkv`` with other fields, is the
compressor ``snapkv`` with those fields, the same cell as ``press=snapkv press.window_size=...``.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from kvx.cli.preflight import check_job, diagnostics_of
from kvx.cli.sources import GROUPS, instantiate, is_option
from kvx.core.errors import ConfigError
from kvx.core.identity import digest
from kvx.core.query import query_mode, stored
from kvx.core.registry import RegistryError, canonical, registry
from kvx.transforms.turns import selection

#: keys that change how a cell runs or where it is logged, not what it computes
RUN_ONLY = ("force", "progress", "capture_cache_mb", "memo_cache_mb", "decode_budget_mb", "per_job", "cells")


def choices(cfg: DictConfig) -> dict[str, str]:
    """The option chosen per plugin group, from Hydra's runtime: the config's own ``hydra`` node where
    it has one (a callback's, before Hydra sets its global config), else the running job's."""
    from hydra.core.hydra_config import HydraConfig

    node = cfg.get("hydra") if "hydra" in cfg else None
    runtime = (node if node is not None else HydraConfig.get()).runtime.choices
    return {g: str(runtime[g]) for g in GROUPS}


def option_name(group: str, chosen: str, value: Any) -> str:
    """The registered name of the option a cell uses: the chosen name when it is registered (canonical:
    ``kvx:snapkv`` is ``snapkv``), else the registered entry whose class the option instantiates."""
    kind = GROUPS[group]
    if is_option(group, chosen):
        return canonical(kind, chosen)
    reg = registry(kind)
    for entry in reg.entries:
        try:
            if entry.load() is type(value):
                return canonical(kind, reg.display_name(entry))
        except RegistryError:
            continue
    raise ConfigError(
        f"{group}={chosen}: its config instantiates {type(value).__name__}, which no registered {kind} "
        f"is; extend a registered one (defaults: [<name>, _self_])"
    )


def build_cell(cfg: DictConfig, typed: dict[str, str]) -> tuple[Any, Any, dict[str, str]]:
    """The cell, its reader's config and the registered name per group; loads no model."""
    from kvx.pipeline.cell import Cell

    check_job(cfg)
    plugins = {group: instantiate(cfg, group) for group in GROUPS}
    names = {group: option_name(group, typed[group], plugins[group]) for group in GROUPS}
    task, transform_name, transform = plugins["task"], names["transform"], plugins["transform"]
    selector = plugins["turn_selector"]
    if not getattr(selector, "identity", False):
        transform_name = f"turns:{names['turn_selector']}"
        transform = selection(
            names["turn_selector"], selector, float(cfg.turn_fraction), bool(cfg.get("turn_markers", True))
        )
    cell = Cell(
        task_name=names["task"],
        task=task,
        reader_name=names["reader"],
        press_name=names["press"],
        compressor=plugins["press"],
        ratio=float(cfg.ratio),
        seed=int(cfg.seed),
        n_sources=int(cfg.n_sources),
        context_tokens=int(cfg.context_tokens),
        max_new_tokens=task.max_new_tokens if cfg.max_new_tokens is None else int(cfg.max_new_tokens),
        query_aware=query_mode(cfg.query_aware),
        diagnostics=diagnostics_of(cfg),
        budget_tokens=None if cfg.budget_tokens is None else int(cfg.budget_tokens),
        transform_name=transform_name,
        transform=transform,
    )
    return cell, plugins["reader"], names


def check_fit(cell: Any, reader: Any, names: dict[str, str]) -> None:
    """The checks of a built cell that need only the reader's tokenizer (``kvx.pipeline.fit``): made
    after every cell's values were checked, so a bad value fails before any tokenizer loads."""
    from kvx.pipeline.fit import check_fits

    check_fits(
        names["task"], cell.task, names["reader"], reader, cell.context_tokens, cell.n_sources, cell.seed
    )


def setting_digest(cfg: DictConfig, typed: dict[str, str], compressor: Any) -> str:
    """What a cell computes, however it was spelled: its resolved config (less what only changes how it
    runs), its options' registered names and its compressor's identity (a wrapper's base by name:
    TOVA and Knorm have no fields, so ``press/base=tova`` and ``=knorm`` resolve to the same config).
    The sweep's grid is the set of these."""
    body = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(body, dict)
    for key in RUN_ONLY:
        body.pop(key, None)
    body["query_aware"] = stored(query_mode(body["query_aware"]))  # true and prompt: one cell
    return digest({"config": body, "choices": typed, "press": compressor.identity_fields()})
