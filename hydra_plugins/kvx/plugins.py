"""kvx's Hydra plugins, found by Hydra's plugin scan of the ``hydra_plugins`` namespace.

- ``KvxSearchPath`` adds the plugin options (``kvxplugins://``) and every installed package's
  ``kvx.conf`` folder to Hydra's config search path;
- ``KvxPluginConfigs`` serves the options of the plugin groups and the typed root config from the
  entry points (``kvx.cli.sources``): listing imports nothing, loading imports the chosen plugin;
- ``KvxSweeper`` (``hydra/sweeper=kvx``, kvx's default) checks every cell before anything is written,
  groups cells into jobs and owns the sweep's MLflow parent run (``kvx.cli.sweeper``).

This module is imported by every Hydra start, so it imports only Hydra's plugin bases; kvx's code is
imported when a method runs.
"""

from __future__ import annotations

from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin

SCHEME = "kvxplugins"


class KvxSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from kvx.cli.sources import conf_dirs

        search_path.append(provider="kvx", path=f"{SCHEME}://kvx")
        for dist, folder in conf_dirs():
            search_path.append(provider=dist, path=f"file://{folder}")


class KvxPluginConfigs(ConfigSource):
    @staticmethod
    def scheme() -> str:
        return SCHEME

    def available(self) -> bool:
        return True

    def load_config(self, config_path: str) -> ConfigResult:
        from kvx.cli import sources
        from kvx.core.registry import RegistryError

        path = config_path.removesuffix(".yaml").strip("/")
        if path == sources.SCHEMA:
            return ConfigResult(self.provider, self.full_path(), sources.schema_node(), {"package": None})
        group, name = sources.split(path)
        try:
            node, dist = sources.option_node(group, name)
        except RegistryError as exc:
            raise ConfigLoadError(str(exc)) from exc
        return ConfigResult(dist, self.full_path(), node, {"package": None})

    def is_group(self, config_path: str) -> bool:
        from kvx.cli.sources import kind_of

        path = config_path.strip("/")
        return path == "" or kind_of(path) is not None

    def is_config(self, config_path: str) -> bool:
        from kvx.cli import sources

        path = config_path.removesuffix(".yaml").strip("/")
        if path == sources.SCHEMA:
            return True
        group, name = sources.split(path)
        return sources.kind_of(group) is not None and sources.is_option(group, name)

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        from kvx.cli import sources

        path = config_path.strip("/")
        if path == "":
            groups = list(sources.GROUPS) if results_filter in (None, ObjectType.GROUP) else []
            configs = [sources.SCHEMA] if results_filter in (None, ObjectType.CONFIG) else []
            return sorted(groups + configs)
        if sources.kind_of(path) is None or results_filter == ObjectType.GROUP:
            return []  # a press's slots (press/base) are groups too, but nested without end: not listed
        return sources.option_names(path)


class KvxSweeper(BasicSweeper):
    """Hydra's basic sweeper, with every cell checked first, cells grouped into jobs and the sweep's
    MLflow parent run; ``plan`` prints the cells and jobs and runs nothing (``true``: a table;
    ``json``: one JSON object)."""

    def __init__(
        self,
        max_batch_size: int | None = None,
        params: dict[str, str] | None = None,
        plan: Any = False,
        scoped: dict[str, list[str]] | None = None,
    ) -> None:
        super().__init__(max_batch_size, params)
        self.plan = plan
        self.scoped = dict(scoped or {})

    def sweep(self, arguments: list[str]) -> Any:
        from kvx.cli.sweeper import sweep

        return sweep(self, list(arguments))
