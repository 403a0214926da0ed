"""How ``python -m kvx`` ends: Hydra's, OmegaConf's and kvx's errors about the input as one line.

Hydra prints its own errors over several lines and exits 1; kvx says what was wrong with the input in
one ``kvx: ...`` line, with the valid choices and the closest one, and exits 2 (``kvx.cli.main``).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from kvx.core.errors import ConfigError, one_line
from kvx.core.registry import RegistryError

#: Hydra's ValueError for two modes at once (``-m ... --cfg job``)
EXCLUSIVE = "Only one of --run, --multirun"


class Stop(BaseException):
    """A kvx error raised where Hydra turns an ``Exception`` into a warning (its callbacks): not an
    ``Exception``, so it reaches ``kvx.cli.main``, which says ``error`` in one line."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def explain(exc: BaseException, search_path: Sequence[str] = ()) -> str | None:
    """The one line for an error about the input, or None for any other error (a bug: its traceback).
    ``search_path``: the command's own config folders (``file://DIR``), where it names any, for listing
    the options of a group once Hydra has ended."""
    from hydra.errors import ConfigCompositionException, HydraException, MissingConfigException
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(exc, Stop):
        return explain(exc.error, search_path)
    if isinstance(exc, (ConfigError, RegistryError)):
        return " ".join(str(exc).split())
    if isinstance(exc, MissingConfigException):
        return _missing(exc, search_path)
    cause = exc.__cause__
    if isinstance(exc, ConfigCompositionException) and isinstance(cause, OmegaConfBaseException):
        unknown = _unknown_key(cause)
        if unknown:
            return unknown
    if isinstance(exc, (HydraException, OmegaConfBaseException)):
        line = one_line(exc)
        key = getattr(exc, "full_key", None)
        if key and not line.startswith(str(key)):
            line = f"{key}: {line}"  # an interpolation that does not resolve, a wrong type: which key
        if line.startswith("Ambiguous value for argument"):
            line += ": to sweep over it add -m; a list is key=[a,b], a string key='a,b'"
        return line
    if isinstance(exc, ValueError) and str(exc).startswith(EXCLUSIVE):
        return f"{exc} (a multirun plans with hydra.sweeper.plan=true; --cfg job shows one cell)"
    return None


def _missing(exc: BaseException, search_path: Sequence[str]) -> str:
    """An unknown option of a group (``press=snapk``) or preset (``+experiment=tpbench/mian``): the
    options there are (a preset's from every folder of the search path), and the closest."""
    name = str(getattr(exc, "missing_cfg_file", "") or "")
    # presets sit in subfolders of one group (tpbench/main); any other option is in its own folder
    group, _, leaf = name.partition("/") if name.startswith("experiment/") else name.rpartition("/")
    options = _options(group, search_path) if leaf else []
    if not options:
        return one_line(exc)
    close = difflib.get_close_matches(leaf, options, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return f"{group}={leaf}: no such option; options: {', '.join(options)}{hint}"


def _options(group: str, search_path: Sequence[str]) -> list[str]:
    """Every config under ``group`` (in its subfolders too) on the search path: the running
    application's, or, once it has ended, kvx's with ``search_path`` added."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from kvx.cli.sources import configs_under
    from kvx.core.conf import conf_dir

    if GlobalHydra.instance().is_initialized():
        return configs_under(GlobalHydra.instance().config_loader(), group, [])
    with initialize_config_dir(config_dir=conf_dir(), version_base="1.3"):
        extra = [f"hydra.searchpath=[{','.join(search_path)}]"] if search_path else []
        return configs_under(GlobalHydra.instance().config_loader(), group, extra)


def _unknown_key(cause: BaseException) -> str | None:
    """``Could not override 'ration'``: the keys valid where it would go, and the closest."""
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    if not isinstance(cause, (ConfigAttributeError, ConfigKeyError)):
        return None
    parent = getattr(cause, "parent_node", None)
    key = str(getattr(cause, "key", "") or "")
    full = str(getattr(cause, "full_key", "") or key)
    if not isinstance(parent, DictConfig) or not key:
        return None
    where = full.rpartition(".")[0]
    if where and OmegaConf.get_type(parent) is dict:  # judge.reader_fields: takes keys, none declared
        return f"{where} is a free-form mapping: add a key to it with +{full}=..."
    return unknown_key(where, key, [str(k) for k in parent if str(k) != "hydra"], holders(parent, key))


def holders(node: object, key: str) -> list[str]:
    """The mappings directly under ``node`` that hold ``key``: a wrapper's base press holds the field set
    on the wrapper (``press.window_size`` is ``press.base.window_size``)."""
    from omegaconf import DictConfig

    if not isinstance(node, DictConfig):
        return []
    return [str(k) for k in node if isinstance(node.get(k), DictConfig) and key in node.get(k)]


def unknown_key(where: str, key: str, valid: Sequence[str], nested: Sequence[str] = ()) -> str:
    """``unknown key 'lease.hartbeat_s'; valid keys of lease: ...; did you mean 'lease.heartbeat_s'?``;
    a key one of ``nested`` holds is suggested there (``press.base.window_size``)."""
    prefix = f"{where}." if where else ""
    names = sorted(valid)
    close = difflib.get_close_matches(key, names, n=1)
    hint = f"; did you mean '{prefix}{close[0]}'?" if close else ""
    if nested and not close:
        hint = f"; did you mean '{prefix}{nested[0]}.{key}'?"
    what = f"keys of {where}" if where else "top-level keys"
    return f"unknown key '{prefix}{key}'; valid {what}: {', '.join(names) or '(none)'}{hint}"
