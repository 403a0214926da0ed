"""Check every job of a command line before Hydra runs anything.

``python -m kvx`` expands the command line's sweep, composes each job's config with Hydra's compose
API and validates it with ``check_job``: names, values, the outputs folder, the tracking store and
each plugin's own ``validate()``. A bad input then fails in about a second with one ``kvx: ...``
line naming the key and the value, before anything is created (no outputs folder, no MLflow store,
no Hydra run folder). Nothing here imports torch, transformers, kvpress or mlflow; ``check_job`` is
also what a job runs on its own config, so both paths accept exactly the same configs.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import itertools
import os
from collections.abc import Iterator, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from omegaconf import DictConfig, ListConfig, OmegaConf

from kvx.cli import grouping, presets
from kvx.cli.config import GROUPS, instantiate, register_configs
from kvx.core.checks import check_bool, check_int, check_optional_int, check_ratio
from kvx.core.errors import ConfigError
from kvx.core.registry import registry
from kvx.diagnostics.base import Diagnostic, check_order
from kvx.stores.tags import tracking_uri
from kvx.transforms.turns import TurnSelection

#: tracking-store schemes MLflow itself serves (a database scheme may name a driver: postgresql+psycopg)
DATABASES = ("sqlite", "postgresql", "mysql", "mssql")
REMOTE = ("http", "https", "databricks", "databricks-uc", "uc")
#: command-line flags after which Hydra runs no job
NO_RUN = ("help", "hydra_help", "cfg", "info", "shell_completion", "experimental_rerun")


def prepare(argv: Sequence[str], config_dir: str) -> list[str]:
    """Register the config nodes ``argv`` needs and, when it runs jobs, check every one of them;
    return the command line Hydra should get (presets expanded, ``for_swept_groups``)."""
    from hydra._internal.utils import get_args_parser

    argv = presets.expand(argv, config_dir)
    args = get_args_parser().parse_args(list(argv))
    if args.help or args.hydra_help:
        register_configs()  # every option, listed once
        return list(argv)
    if args.config_path:
        config_dir = str(Path(config_dir).parent / args.config_path)
    config_name = args.config_name or "config"
    overrides = _parse(args.overrides)
    multirun = args.multirun or any(o.input_line == "hydra.mode=MULTIRUN" for o in overrides)
    jobs = list(expand([o for o in overrides if not _is_hydra(o)], multirun))
    listed = config_defaults(config_dir, config_name)
    defaults = None if listed is None else {g: v for g, v in listed.items() if g in GROUPS}
    wanted = _typed(jobs, defaults or {})
    for group, typed in wanted.items():
        for name in sorted(typed):
            registry(GROUPS[group]).entry(name).load()  # unknown, ambiguous or broken: one clear line
    if defaults is None:  # a config kvx cannot read ahead: its defaults may name any plugin
        for group, kind in GROUPS.items():
            wanted[group] |= set(registry(kind).names())
    register_configs(wanted)
    if any(getattr(args, flag) for flag in NO_RUN) or args.config_dir:
        return list(argv)  # nothing runs, or the config comes from a folder the compose below does not search
    check_launcher(overrides)
    per_job = grouping.axes(overrides)
    if per_job and not multirun:
        raise ConfigError(f"{grouping.KEY} groups the cells of a multirun: add -m")
    if multirun and not per_job and grouping.in_one_process(overrides, listed):
        per_job = grouping.swept([o for o in overrides if not _is_hydra(o)])
    moved = grouping.inner([o for o in overrides if not _is_hydra(o)], per_job) if per_job else []
    check_jobs(config_dir, config_name, jobs)
    if not moved:
        return for_swept_groups(list(argv), overrides)
    argv = grouping.group(list(argv), overrides, list(expand(moved, True)), moved)
    return for_swept_groups(argv, [o for o in overrides if o not in moved])


def for_swept_groups(argv: list[str], overrides: Sequence[Any]) -> list[str]:
    """``task=tpbench_p1,tpbench_p2 task.corpus=sgd``: Hydra composes a multirun's primary config
    with the group's default option, where ``task.corpus`` does not exist, and fails before any job.
    Every job was composed and checked above, so a field of a swept group is passed as ``++`` (set
    where it exists, added to the primary config where it does not)."""
    swept = {o.key_or_group for o in overrides if o.is_sweep_override() and o.key_or_group in GROUPS}
    fields = {
        o.input_line for o in overrides if o.key_or_group.partition(".")[0] in swept and "." in o.key_or_group
    }
    return [f"++{a.lstrip('+')}" if a in fields else a for a in argv]


#: launcher option -> the Hydra plugin package it needs (kvx's presets are named kvx_<launcher>)
LAUNCHERS = {
    "joblib": "hydra_joblib_launcher",
    "submitit": "hydra_submitit_launcher",
    "ray": "hydra_ray_launcher",
}


def check_launcher(overrides: Sequence[Any]) -> None:
    """``hydra/launcher=<x>`` (kvx's presets: kvx_joblib, kvx_submitit_local, kvx_slurm, kvx_ray)
    whose plugin is not installed: say which extra installs it. Other launchers are Hydra's to check."""
    from importlib.util import find_spec

    for o in overrides:
        if o.key_or_group != "hydra/launcher" or o.is_sweep_override():
            continue
        name = str(o.value())
        plugin = next((pkg for key, pkg in LAUNCHERS.items() if key in name), None)
        if plugin is not None and find_spec(f"hydra_plugins.{plugin}") is None:
            raise ConfigError(f'{o.input_line} needs the {plugin} plugin: pip install "kvx[launchers]"')


def check_jobs(config_dir: str, config_name: str, jobs: Sequence[list[str]]) -> None:
    """Compose and check each job as Hydra will run it.

    Hydra composes a job in two steps: the defaults list (group choices), then every other override
    applied to the merged config. The first costs tens of milliseconds, so it runs once per distinct
    set of group choices; the second is Hydra's own function, run on a copy for each job.
    """
    from hydra import compose, initialize_config_dir

    bases: dict[tuple[str, ...], DictConfig] = {}
    uris: set[str] = set()
    served: dict[str, tuple[str, Any]] = {}
    with initialize_config_dir(config_dir=config_dir, version_base="1.3", job_name="kvx"):
        for job in jobs:
            parsed = _parse(job)
            groups = tuple(o.input_line for o in parsed if o.key_or_group in GROUPS)
            values = [o for o in parsed if o.key_or_group not in GROUPS]
            if groups not in bases:
                bases[groups] = _compose(compose, config_name, list(groups))
            for override in values:
                if not override.is_delete():
                    check_known(bases[groups], override.key_or_group, override.input_line)
            cfg = _apply(bases[groups], values)
            check_job(cfg)
            uris.add(tracking_uri(cfg))
            judging = getattr(_instantiate(cfg, "judge"), "model_config", None) if "judge" in cfg else None
            for where, model in (("", _instantiate(cfg, "reader")), ("judge: ", judging and judging())):
                if hasattr(model, "preflight"):  # a served reader or judge model: its server, once each
                    served[repr(model)] = (where, model)
    for uri in sorted(uris):
        check_reachable(uri)
    for where, model in served.values():
        try:
            model.preflight()
        except ConfigError as exc:
            raise ConfigError(f"{where}{exc}") from None


def check_job(cfg: DictConfig) -> None:
    """Validate one composed job config: every value, the outputs folder, the tracking store and each
    plugin's own ``validate()``. Loads no model and creates nothing; raises ConfigError or RegistryError."""
    check_ratio(cfg.ratio)
    check_optional_int("budget_tokens", cfg.get("budget_tokens"), 1)  # kept tokens; ratio unused when set
    check_int("seed", cfg.seed)
    check_int("n_sources", cfg.n_sources, 1)
    check_optional_int("max_new_tokens", cfg.max_new_tokens, 1)
    for key in ("query_aware", "force", "progress"):
        check_bool(key, cfg[key])
    for key in ("capture_cache_mb", "memo_cache_mb"):
        if key in cfg:
            check_int(key, cfg[key], 0)
    check_optional_int("decode_budget_mb", cfg.get("decode_budget_mb"), 1)
    diagnostics_of(cfg)
    plugins = {group: _instantiate(cfg, group) for group in GROUPS if cfg.get(group) is not None}
    for plugin in plugins.values():
        plugin.validate()
    check_turn_selection(cfg, plugins)
    for group in ("task", "reader", "press"):
        if group not in plugins:
            raise ConfigError(f"no {group} chosen: set {group}=<name> (python -m kvx --help lists them)")
    task = plugins["task"]
    minimum = max(1, getattr(task, "min_context_tokens", 1))
    if check_int("context_tokens", cfg.context_tokens, 1) < minimum:
        raise ConfigError(
            f"context_tokens={cfg.context_tokens} is below {minimum}, the fewest tokens any "
            f"{type(task).__name__} prompt takes"
        )
    check_folder("outputs_dir", cfg.outputs_dir)
    check_tracking_uri(tracking_uri(cfg))
    check_lease(cfg.get("lease"))
    sample = cfg.get("tracing", {}).get("sample", 0.0)
    if isinstance(sample, bool) or not isinstance(sample, (int, float)) or not 0 <= sample <= 1:
        raise ConfigError(f"tracing.sample={sample!r} must be a share of sources in [0, 1]")


def check_lease(node: Any) -> None:
    """Positive seconds, and a stale limit that several missed heartbeats cannot reach by accident."""
    if node is None:
        return
    for key, value in node.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ConfigError(f"lease.{key}={value!r} must be a positive number of seconds")
    if "stale_s" in node and "heartbeat_s" in node and node.stale_s < 3 * node.heartbeat_s:
        raise ConfigError(
            f"lease.stale_s={node.stale_s} must be at least 3 x lease.heartbeat_s={node.heartbeat_s}: "
            "a live worker would look dead after one slow heartbeat"
        )


def check_turn_selection(cfg: DictConfig, plugins: dict[str, Any]) -> None:
    """``turn_selector=<name>`` needs ``turn_fraction`` and is the run's text transform; a fraction
    without a selector would be silently unused."""
    selector = plugins.get("turn_selector")
    fraction = cfg.get("turn_fraction")
    if selector is None or getattr(selector, "identity", False):
        if fraction is not None:
            raise ConfigError(f"turn_fraction={fraction} is set but turn_selector=none: choose a selector")
        return
    if fraction is None:
        raise ConfigError("turn_selector needs turn_fraction=<fraction of turns kept, in (0, 1]>")
    TurnSelection("", fraction, cfg.get("turn_markers", True)).validate()  # the run's own checks
    transform = plugins.get("transform")
    if transform is not None and not getattr(transform, "identity", False):
        raise ConfigError("turn_selector and transform are both text transforms: choose one (transform=none)")


def diagnostics_of(cfg: DictConfig) -> list[tuple[str, Diagnostic]]:
    """The run's diagnostics in order, each built with its ``diagnostic_fields.<name>`` and checked:
    known names and fields, valid values, and every diagnostic after those whose results it reads.
    Diagnostic plugins import no framework when they load, so this loads no model."""
    names = cfg.diagnostics if cfg.diagnostics is not None else []
    if not isinstance(names, (list, ListConfig)) or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"diagnostics={names!r} must be a list of names, e.g. diagnostics=[coverage]")
    given = cfg.get("diagnostic_fields") or {}
    out = []
    for name in names:
        cls = registry("diagnostic").get(name)
        fields = dict(OmegaConf.to_container(given[name])) if given.get(name) else {}  # type: ignore[arg-type]
        known = [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else []
        for key in fields:
            if key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConfigError(
                    f"diagnostic_fields.{name}.{key}: {name} has no such field "
                    f"(fields: {', '.join(known) or 'none'}){hint}"
                )
        try:
            out.append((name, cls(**fields)))
        except ConfigError:
            raise
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"diagnostic_fields.{name}: {_one_line(exc)}") from None
    check_order(out)
    return out


def diagnostic_label(name: str, diagnostic: Diagnostic) -> str:
    """A diagnostic as a run's identity names it: with each field set away from its default, and
    each field marked ``identity="always"`` (one whose default changed meaning, e.g. the
    intervention's ``cohort``), so a finished run made otherwise is recomputed, never reused.
    Fields at their defaults stay out: runs made before fields were configurable keep their name."""
    shown = {
        f.name: getattr(diagnostic, f.name)
        for f in (dataclasses.fields(diagnostic) if dataclasses.is_dataclass(diagnostic) else ())
        if not f.name.startswith("_")
        and (f.metadata.get("identity") == "always" or getattr(diagnostic, f.name) != f.default)
    }
    return f"{name}({','.join(f'{k}={v}' for k, v in sorted(shown.items()))})" if shown else name


def check_known(base: DictConfig, key: str, line: str) -> None:
    """``key`` exists in the job's default config: ``+foo=1`` would set something kvx never reads."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(base, parent) if parent else base
    if isinstance(node, ListConfig) and leaf.isdigit() or isinstance(node, DictConfig) and leaf in node:
        return
    # a free-form mapping (judge.reader_fields), not the config's root: ``+`` adds a key it is meant to take
    free_form = bool(parent) and isinstance(node, DictConfig) and OmegaConf.get_type(node) is dict
    if free_form and line.startswith("+"):
        return
    if free_form:
        raise ConfigError(f"{line}: {parent} is a free-form mapping: add a key to it with +{key}=...")
    valid = ", ".join(sorted(str(k) for k in node)) if isinstance(node, DictConfig) else ""
    where = f"keys of {parent}" if parent else "top-level keys"
    raise ConfigError(f"{line}: unknown key '{key}'; valid {where}: {valid or '(none)'}")


def check_folder(key: str, value: Any) -> None:
    """A folder kvx may write into: an existing writable one, or one it can create (creating nothing now)."""
    path = Path(str(value))
    if path.exists():
        if not path.is_dir():
            raise ConfigError(f"{key}={value} is a file, not a folder")
        if not writable(path):
            raise ConfigError(f"{key}={value} is not writable")
        return
    parent = next(p for p in path.absolute().parents if p.exists())
    if not parent.is_dir():
        raise ConfigError(f"{key}={value} cannot be created: {parent} is a file")
    if not writable(parent):
        raise ConfigError(f"{key}={value} cannot be created: {parent} is not writable")


def writable(folder: Path) -> bool:
    """Permission bits and read-only mounts (root passes the first everywhere but not the second)."""
    return os.access(folder, os.W_OK | os.X_OK) and not os.statvfs(folder).f_flag & os.ST_RDONLY


def check_tracking_uri(uri: str) -> None:
    """A scheme MLflow serves, and for a local store (sqlite file, file store) a folder it can create.

    Parsed here rather than by MLflow: importing mlflow takes seconds, and asking it creates the store.
    """
    key = "MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI") else "mlflow.tracking_uri"
    scheme = uri if uri in REMOTE else urlparse(uri).scheme.lower()  # MLflow reads a bare "databricks" so
    if len(scheme) <= 1 or scheme == "file":  # a plain path (or a Windows drive) is a file store
        check_folder(key, urlparse(uri).path if scheme == "file" else uri)
    elif scheme == "sqlite":
        path = uri.removeprefix("sqlite:///")
        if path != uri and path not in ("", ":memory:"):
            if Path(path).is_dir():
                raise ConfigError(f"{key}={uri}: {path} is a folder, not a database file")
            check_folder(key, Path(path).parent)
    elif scheme.split("+")[0] not in DATABASES and scheme not in REMOTE and scheme not in _plugin_schemes():
        raise ConfigError(
            f"{key}={uri}: MLflow has no tracking store for scheme '{scheme}'; use sqlite:///<file>, "
            "a folder, http(s)://, postgresql://, mysql://, mssql:// or databricks"
        )


def check_reachable(uri: str, key: str | None = None, timeout_s: float = 10.0) -> None:
    """A tracking server or database that does not answer fails now, in one line, instead of after
    MLflow's retries (minutes of silence). Something that answers at all passes: MLflow then speaks."""
    import socket
    import urllib.error
    import urllib.request

    key = key or ("MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI") else "mlflow.tracking_uri")
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    try:
        if scheme in ("http", "https"):
            try:
                urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout_s).close()
            except urllib.error.HTTPError:
                return  # a server answered (a proxy, auth, an older MLflow)
        elif scheme.split("+")[0] in _PORTS and parsed.hostname:
            port = parsed.port or _PORTS[scheme.split("+")[0]]
            socket.create_connection((parsed.hostname, port), timeout=timeout_s).close()
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        server = "tracking server (python -m kvx.server)" if scheme.startswith("http") else "database"
        raise ConfigError(
            f"{key}={uri}: nothing answers there within {timeout_s:g} s ({reason}); start the {server} "
            f"or unset {key} to use the embedded store"
        ) from None


#: default ports of the database servers MLflow stores runs in
_PORTS = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}


def _plugin_schemes() -> set[str]:
    return {ep.name for ep in entry_points(group="mlflow.tracking_store")}


def expand(overrides: Sequence[Any], multirun: bool) -> Iterator[list[str]]:
    """The jobs Hydra's basic sweeper launches: the product of every sweep axis, in its order."""
    axes: list[list[str]] = []
    for o in overrides:
        if not o.is_sweep_override():
            axes.append([o.input_line])
        elif not multirun:
            raise ConfigError(f"{o.input_line} is a sweep: add -m to run one job per value, or quote it")
        elif o.is_discrete_sweep():
            axes.append([f"{o.get_key_element()}={v}" for v in _sweep_values(o)])
        # other sweeps (intervals) are a sweeper plugin's business: checked by the job itself
    return (list(job) for job in itertools.product(*axes))


def _sweep_values(o: Any) -> list[str]:
    from hydra.core.override_parser.types import ValueType
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    if o.value_type == ValueType.GLOB_CHOICE_SWEEP:
        if o.key_or_group not in GROUPS:
            raise ConfigError(f"{o.input_line}: glob() selects options of a group ({', '.join(GROUPS)})")
        return list(o.value().filter(registry(GROUPS[o.key_or_group]).names()))
    try:
        return list(o.sweep_string_iterator())
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        raise ConfigError(f"{o.input_line}: not a sweep Hydra can expand ({_one_line(exc)})") from None


def _parse(lines: Sequence[str]) -> list[Any]:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    out = []
    for line in lines:
        try:
            out.extend(parser.parse_overrides([line]))
        except OverrideParseException as exc:
            raise ConfigError(f"{line}: {_one_line(exc)} (see Hydra's override grammar)") from None
    return out


def _is_hydra(o: Any) -> bool:
    return o.key_or_group == "hydra" or o.key_or_group.startswith(("hydra.", "hydra/"))


def _typed(jobs: Sequence[list[str]], defaults: dict[str, str]) -> dict[str, set[str]]:
    """Group -> every option name the jobs use: each group override (a later override of the same
    group still has its earlier value checked: a typo is reported, not silently replaced), and the
    config's default where a job does not override it."""
    out: dict[str, set[str]] = {group: set() for group in GROUPS}
    for job in jobs:
        groups = [o for o in _parse(job) if o.key_or_group in GROUPS]
        for o in groups:
            if not o.is_delete():
                out[o.key_or_group].add(str(o.value()))
        for group in defaults.keys() - {o.key_or_group for o in groups}:
            out[group].add(defaults[group])
    return out


def config_defaults(config_dir: str, config_name: str) -> dict[str, str] | None:
    """The primary config's defaults list as group -> option (``hydra/launcher`` included), read
    from its file; None when there is no such file."""
    path = Path(config_dir) / f"{config_name.removesuffix('.yaml')}.yaml"
    if not path.is_file():
        return None
    out: dict[str, str] = {}
    for item in OmegaConf.load(path).get("defaults") or []:
        if isinstance(item, DictConfig):
            for key, value in item.items():
                group = str(key).removeprefix("override ").strip().lstrip("/").split("@")[0]
                if value is not None:
                    out[group] = str(value)
    return out


def _compose(compose: Any, config_name: str, overrides: list[str]) -> DictConfig:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        return compose(config_name=config_name, overrides=overrides)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(_one_line(exc)) from None


def _apply(base: DictConfig, overrides: list[Any]) -> DictConfig:
    """``base`` with value overrides applied exactly as Hydra's compose applies them."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl  # hydra-core is pinned (1.3.8)
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    cfg = copy.deepcopy(base)
    try:
        ConfigLoaderImpl._apply_overrides_to_config(overrides, cfg)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(_one_line(exc)) from None
    return cfg


def _instantiate(cfg: DictConfig, group: str) -> Any:
    """The group's dataclass; a field rejected by its ``__post_init__`` names the group."""
    from omegaconf.errors import OmegaConfBaseException

    try:
        return instantiate(cfg, group)
    except ConfigError:
        raise
    except (ValueError, TypeError, OmegaConfBaseException) as exc:
        raise ConfigError(f"{group}: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    """Hydra's and OmegaConf's messages span lines (hints, full_key, object_type): keep the first of
    the error and of its cause."""
    parts = [str(e).strip().splitlines()[0] for e in (exc, exc.__cause__) if e is not None and str(e).strip()]
    return ": ".join(dict.fromkeys(parts))
