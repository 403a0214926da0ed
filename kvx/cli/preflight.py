"""Check one composed cell's settings, and the services a sweep's cells use, before anything runs.

The sweeper (``kvx.cli.sweeper``) runs ``check_job`` on every cell of a sweep and the single-run
callback on its one cell, through ``kvx.cli.cells``: values, the outputs folder, the tracking store and
each plugin's own ``validate()``. A bad input fails with one ``kvx: ...`` line naming the key and the
value, before anything is created (no outputs folder, no MLflow store, no Hydra run folder). Nothing
here imports torch, transformers, kvpress or mlflow, and no tracking store is opened.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from omegaconf import DictConfig, ListConfig, OmegaConf

from kvx.cli.errors import holders, unknown_key
from kvx.cli.sources import GROUPS, instantiate
from kvx.core.checks import check_bool, check_int, check_optional_int, check_ratio
from kvx.core.errors import ConfigError, one_line
from kvx.core.query import query_mode
from kvx.core.registry import registry
from kvx.diagnostics.base import Diagnostic, check_order
from kvx.stores.tags import tracking_uri
from kvx.transforms.turns import TurnSelection

#: tracking-store schemes MLflow itself serves (a database scheme may name a driver: postgresql+psycopg)
DATABASES = ("sqlite", "postgresql", "mysql", "mssql")
REMOTE = ("http", "https", "databricks", "databricks-uc", "uc")


def check_services(configs: Sequence[DictConfig]) -> None:
    """Each tracking store and served model (reader or judge) the cells use answers, once each."""
    uris: set[str] = set()
    served: dict[str, tuple[str, Any]] = {}
    for cfg in configs:
        uris.add(tracking_uri(cfg))
        judging = getattr(instantiate(cfg, "judge"), "model_config", None) if "judge" in cfg else None
        for where, model in (("", instantiate(cfg, "reader")), ("judge: ", judging and judging())):
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
    check_known(cfg)
    check_ratio(cfg.ratio)
    check_optional_int("budget_tokens", cfg.get("budget_tokens"), 1)  # kept tokens; ratio unused when set
    check_int("seed", cfg.seed)
    check_int("n_sources", cfg.n_sources, 1)
    check_optional_int("max_new_tokens", cfg.max_new_tokens, 1)
    query_mode(cfg.query_aware)
    for key in ("force", "progress"):
        check_bool(key, cfg[key])
    for key in ("capture_cache_mb", "memo_cache_mb"):
        if key in cfg:
            check_int(key, cfg[key], 0)
    check_optional_int("decode_budget_mb", cfg.get("decode_budget_mb"), 1)
    diagnostics_of(cfg)
    plugins = {group: instantiate(cfg, group) for group in GROUPS if cfg.get(group) is not None}
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


def check_known(node: DictConfig, where: str = "") -> None:
    """Every key of a typed node (the root, ``lease``, each plugin's dataclass, ...) is a field kvx reads:
    ``+foo=1`` and ``++foo=1`` add a key that Hydra's typed config would otherwise refuse, and that
    nothing reads. Free-form mappings (``diagnostic_fields``) take any key."""
    kind = OmegaConf.get_type(node)
    fields = {f.name for f in dataclasses.fields(kind)} if dataclasses.is_dataclass(kind) else None
    for key in node:
        name = str(key)
        if name == "hydra" and not where:
            continue
        if fields is not None and name not in fields:
            raise ConfigError(unknown_key(where, name, fields, holders(node, name)))
        if OmegaConf.is_missing(node, name) or OmegaConf.is_interpolation(node, name):
            continue
        part = node[name]
        if isinstance(part, DictConfig):
            check_known(part, f"{where}.{name}" if where else name)


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
            raise ConfigError(f"diagnostic_fields.{name}: {one_line(exc)}") from None
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
