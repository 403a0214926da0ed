"""Compose many cells of one sweep fast: Hydra composes each distinct defaults list once, and the
value overrides of each cell are applied to a copy, as Hydra's composition applies them.

A 264-cell preset has 88 distinct defaults lists (task x press) but 264 cells: composing each cell
from scratch costs ~40 ms, applying three value overrides to a copy well under one.
``tests/cli/test_compose.py`` pins ``Composer`` against Hydra's own ``compose`` on every override form
kvx accepts (``key=``, ``+key=``, ``++key=``, ``~key``, nested keys, lists, dicts, errors).
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Callable, Sequence
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from kvx.cli.errors import holders
from kvx.core.errors import ConfigError

#: overrides -> (config with its ``hydra`` node removed, choice per config group)
Composed = tuple[DictConfig, dict[str, str]]


def parse(lines: Sequence[str], config_loader: Any = None) -> list[Any]:
    """Hydra's own override parser; a line it cannot parse is one ConfigError naming it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create(config_loader=config_loader)
    out = []
    for line in lines:
        try:
            out.extend(parser.parse_overrides([line]))
        except OverrideParseException as exc:
            first = str(exc).strip().splitlines()[0]
            raise ConfigError(f"{line}: {first} (see Hydra's override grammar)") from None
    return out


class Composer:
    """``composer(overrides)``: the composed config and group choices of one cell."""

    def __init__(self, compose: Callable[[list[str]], DictConfig], is_group: Callable[[str], bool]) -> None:
        self._compose = compose
        self._is_group = is_group
        self._groups: dict[str, bool] = {}
        self._bases: dict[tuple[str, ...], Composed] = {}

    @classmethod
    def of_hydra(cls, hydra_node: Any) -> Composer:
        """A composer on the running Hydra application: its primary config and its ``hydra.*`` overrides
        (``hydra.searchpath`` among them; ``--config-dir`` is in the loader already)."""
        from hydra import compose
        from hydra.core.global_hydra import GlobalHydra

        loader = GlobalHydra.instance().config_loader()
        config_name = str(hydra_node.job.config_name)
        own = [str(o) for o in hydra_node.overrides.hydra]

        def composed(overrides: list[str]) -> DictConfig:
            return compose(config_name, overrides=[*own, *overrides], return_hydra_config=True)

        return cls(composed, lambda name: bool(loader.get_group_options(name, results_filter=None)))

    def __call__(self, overrides: Sequence[str]) -> Composed:
        parsed = parse(overrides)
        structural = [o for o in parsed if self._structural(o)]
        values = [o for o in parsed if not self._structural(o)]
        key = tuple(o.input_line for o in structural)
        if key not in self._bases:
            self._bases[key] = self._base(list(key))
        base, choices = self._bases[key]
        cfg = copy.deepcopy(base)
        apply(cfg, values)
        return cfg, dict(choices)

    def _structural(self, o: Any) -> bool:
        """Overrides Hydra resolves in the defaults list (a group choice, a package) or its own node."""
        key = o.key_or_group
        if o.package is not None or key == "hydra" or key.startswith(("hydra.", "hydra/")):
            return True
        if key not in self._groups:
            self._groups[key] = "." not in key and self._is_group(key)
        return self._groups[key]

    def _base(self, overrides: list[str]) -> Composed:
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException

        try:
            cfg = self._compose(overrides)
        except (HydraException, OmegaConfBaseException, OSError) as exc:
            from kvx.cli.errors import explain

            raise ConfigError(explain(exc) or str(exc)) from None
        choices = {str(k): str(v) for k, v in cfg.hydra.runtime.choices.items() if v is not None}
        with open_dict(cfg):
            del cfg["hydra"]
        return cfg, choices


def apply(cfg: DictConfig, overrides: Sequence[Any]) -> None:
    """Apply value overrides (``key=v``, ``+key=v``, ``++key=v``, ``~key``) to ``cfg`` in order, with the
    semantics of Hydra's composition; an override that does not apply is one ConfigError naming it and,
    for an unknown key, the valid keys there and the closest one."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    for o in overrides:
        key, value = o.key_or_group, o.value()
        try:
            if o.is_delete():
                found = OmegaConf.select(cfg, key, throw_on_missing=False)
                if found is None:
                    raise ConfigError(f"{o.input_line}: could not delete '{key}': it does not exist")
                if value is not None and value != found:
                    raise ConfigError(f"{o.input_line}: could not delete '{key}': its value is {found!r}")
                parent, _, leaf = key.rpartition(".")
                with open_dict(cfg):
                    del (OmegaConf.select(cfg, parent) if parent else cfg)[leaf]
            elif o.is_add():
                if OmegaConf.select(cfg, key, throw_on_missing=False) is not None and not isinstance(
                    value, (dict, list)
                ):
                    raise ConfigError(f"{o.input_line}: could not add '{key}': it is already set; use {key}=")
                OmegaConf.update(cfg, key, value, merge=True, force_add=True)
            elif o.is_force_add():
                OmegaConf.update(cfg, key, value, merge=True, force_add=True)
            else:
                try:
                    OmegaConf.update(cfg, key, value, merge=True)
                except (ConfigAttributeError, ConfigKeyError):
                    raise ConfigError(unknown_key(cfg, key, o.input_line)) from None
        except ConfigError:
            raise
        except OmegaConfBaseException as exc:
            from kvx.core.errors import one_line

            raise ConfigError(f"{o.input_line}: {one_line(exc)}") from None


def unknown_key(cfg: DictConfig, key: str, line: str) -> str:
    """``key`` is not in the config: the valid keys where it would go, and the closest one."""
    parts = key.split(".")
    node: Any = cfg
    depth = 0
    for part in parts[:-1]:
        child = node.get(part) if isinstance(node, DictConfig) else None
        if not isinstance(child, (DictConfig, ListConfig)):
            break
        node, depth = child, depth + 1
    parent = ".".join(parts[:depth])
    leaf = parts[depth]
    valid = sorted(str(k) for k in node) if isinstance(node, DictConfig) else []
    free_form = bool(parent) and isinstance(node, DictConfig) and OmegaConf.get_type(node) is dict
    if free_form:
        return f"{line}: {parent} is a free-form mapping: add a key to it with +{key}=..."
    close = difflib.get_close_matches(leaf, valid, n=1)
    hint = f"; did you mean '{'.'.join([*parts[:depth], close[0]])}'?" if close else ""
    nested = holders(node, leaf)
    if nested and not close:  # a wrapper's base press holds it: press.base.window_size
        hint = f"; did you mean '{'.'.join([*parts[:depth], nested[0], leaf])}'?"
    where = f"keys of {parent}" if parent else "top-level keys"
    return f"{line}: unknown key '{key}'; valid {where}: {', '.join(valid) or '(none)'}{hint}"
