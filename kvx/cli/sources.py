"""What kvx's Hydra plugins serve (``hydra_plugins/kvx``): plugin options and plugin packages' ``conf/``.

Every registered task, reader, press, transform, turn selector and judge is an option of its config
group (``press=snapkv``), read from the entry points: names are listed without importing anything, and
a plugin's module is imported only when its option is loaded, so ``--help`` lists a broken or heavy
plugin without paying for it. An installed package that ships configs (presses built on registered
ones, tasks, ``+experiment=`` presets) names its config package under the ``kvx.conf`` entry point
group; the search-path plugin adds that folder, found without importing the package.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from kvx.core.registry import DISABLE_ENV, RegistryError, registry

#: config group -> registry kind
GROUPS = {
    "task": "task",
    "reader": "reader",
    "press": "compressor",
    "transform": "transform",
    "turn_selector": "turn_selector",
    "judge": "judge",
}
#: the config slots of a press that wraps others: nested groups ``press/base``, ``press/base/base``...
#: (``press=adakv press/base=tova``); a slot's options are every registered press
SLOTS = ("base", "first", "second", "prefilling")
#: the typed root config (``kvx.cli.schema.RunConfig``), first in conf/config.yaml's defaults
SCHEMA = "kvx_schema"
#: entry point group of installed packages' config folders: ``name = "package.conf"``
CONF_GROUP = "kvx.conf"


def kind_of(group: str) -> str | None:
    """The registry kind of a config group: a plugin group, or a press's slot (``press/base/first``);
    None for any other folder."""
    top, *slots = group.strip("/").split("/")
    if not slots:
        return GROUPS.get(top)
    return "compressor" if top == "press" and all(s in SLOTS for s in slots) else None


def option_names(group: str) -> list[str]:
    """The options of a plugin group as a user types them (``kvx.core.registry.Registry.names``)."""
    return registry(_kind(group)).names()


def _kind(group: str) -> str:
    kind = kind_of(group)
    if kind is None:
        raise KeyError(f"{group} is not a plugin group")
    return kind


def is_option(group: str, name: str) -> bool:
    """Whether ``name`` (bare or ``dist:name``) is registered in ``group``; imports nothing."""
    reg = registry(_kind(group))
    return any(name in (reg.display_name(e), e.name, e.qualified) for e in reg.entries)


def option_node(group: str, name: str) -> tuple[DictConfig, str]:
    """The structured config of an option (its dataclass, so ``press.<field>=`` is type-checked) and the
    distribution that provides it. A press that wraps others names its slots' default options in a
    defaults list, so ``press/base=<name>`` chooses another and ``press.base.<field>=`` sets its fields.
    RegistryError for an unknown, ambiguous or broken entry, or one that is not a dataclass."""
    entry = registry(_kind(group)).entry(name)
    cls = entry.load()
    if not dataclasses.is_dataclass(cls):
        raise RegistryError(f"{group} '{name}' from {entry.qualified} is not a dataclass: it has no config")
    node = OmegaConf.structured(cls)
    slots = {f.name: f.metadata["slot"] for f in dataclasses.fields(cls) if "slot" in f.metadata}
    if slots:
        with open_dict(node):  # Hydra reads and removes it (a structured config's own defaults list)
            node.defaults = ["_self_", *({k: v} for k, v in slots.items())]
    return node, entry.dist


def schema_node() -> DictConfig:
    from kvx.cli.schema import RunConfig

    return OmegaConf.structured(RunConfig)


def conf_dirs() -> list[tuple[str, str]]:
    """``(distribution, folder)`` of every installed ``kvx.conf`` entry point, in name order.

    The value names a package holding YAML configs (``kvx_plugin_example.conf``). Its folder is found
    with ``importlib.util.find_spec`` on the top-level package, which locates it (a regular or an
    editable install) without running its ``__init__``; an entry whose folder is missing is skipped
    (``python -m kvx.plugins`` lists it). ``KVX_DISABLE_PLUGINS=1`` turns them off with the rest."""
    import os

    if os.environ.get(DISABLE_ENV, "").lower() in {"1", "true", "yes"}:
        return []
    out = []
    for ep in sorted(entry_points(group=CONF_GROUP), key=lambda e: e.name):
        folder = package_folder(ep.value)
        if folder is not None:
            dist = getattr(getattr(ep, "dist", None), "name", None) or ep.name
            out.append((str(dist), str(folder)))
    return out


def package_folder(dotted: str) -> Path | None:
    """The folder of package ``a.b.c`` on ``sys.path``, or None; imports nothing."""
    top, _, rest = dotted.strip().partition(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    for root in roots:
        folder = Path(root).joinpath(*rest.split(".")) if rest else Path(root)
        if folder.is_dir():
            return folder
    return None


def split(config_path: str) -> tuple[str, str]:
    """``press/snapkv.yaml`` -> ``("press", "snapkv")``."""
    group, _, name = config_path.removesuffix(".yaml").strip("/").rpartition("/")
    return group, name


def instantiate(cfg: DictConfig, group: str) -> Any:
    """The group's dataclass object; a field its ``__post_init__`` rejects is a ConfigError naming
    the group."""
    from omegaconf.errors import OmegaConfBaseException

    from kvx.core.errors import ConfigError, one_line

    try:
        return OmegaConf.to_object(cfg[group])
    except ConfigError:
        raise
    except (ValueError, TypeError, OmegaConfBaseException) as exc:
        raise ConfigError(f"{group}: {one_line(exc)}") from None


def configs_under(loader: Any, group: str, overrides: list[str]) -> list[str]:
    """Every config of ``group`` and its subfolders (``tpbench/main`` under ``experiment``) on the search
    path of Hydra's config ``loader``, with the command's ``hydra.*`` ``overrides`` (its searchpath).
    kvx's ``config.yaml`` sets no ``hydra.searchpath``, so it is not loaded for each listing."""
    from hydra.core.object_type import ObjectType

    out, folders = [], [group]
    while folders:
        folder = folders.pop()
        prefix = folder[len(group) :].strip(
            "/"
        )  # relative to the group: press/base lists tova, not base/tova
        for kind in (ObjectType.CONFIG, ObjectType.GROUP):
            names = loader.get_group_options(folder, kind, overrides=overrides)  # no primary config read
            if kind is ObjectType.CONFIG:
                out.extend(f"{prefix}/{n}" if prefix else n for n in names)
            else:
                folders.extend(f"{folder}/{n}" for n in names)
    return sorted(set(out))
