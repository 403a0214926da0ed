"""``per_job=[press,ratio]``: run several cells of a sweep in one launcher job.

A parallel launcher (joblib, submitit/Slurm, Ray) starts one process per job, and a process that runs
one cell loads the model and prefills every source for that cell alone. Naming sweep axes in
``per_job`` moves them inside the job: Hydra launches one job per combination of the other axes, and
each job runs the product of the named axes itself (``kvx.cli.app.run_group``), so the model loads once
and each source's prefill serves every cell of the group. Fields of a named group go with it
(``press.window_size`` with ``press``). The cells travel in one ``cells='<json>'`` override, so a
job's command line is still the whole truth about what it ran.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from kvx.core.errors import ConfigError

KEY = "per_job"


def axes(overrides: Sequence[Any]) -> list[str]:
    """The axes ``per_job`` names on the command line (empty when it is not set)."""
    for o in overrides:
        if o.key_or_group != KEY:
            continue
        if o.is_sweep_override():
            raise ConfigError(f"{o.input_line} is a sweep; write {KEY}=[a,b] to name several axes")
        value = o.value()
        names = [value] if isinstance(value, str) else list(value or [])
        if not all(isinstance(n, str) and n for n in names):
            raise ConfigError(f"{o.input_line}: name config keys, e.g. {KEY}=[press,ratio]")
        return names
    return []


def in_one_process(overrides: Sequence[Any], defaults: Mapping[str, str] | None) -> bool:
    """Hydra's basic launcher and sweeper run every job of a sweep in this process, one after
    another: kvx then groups the whole sweep itself, so cells that share a split run source by
    source (``kvx.cli.app.run_cells``). A launcher or sweeper chosen on the command line or in the
    primary config's ``defaults`` (``preflight.config_defaults``; None: a config kvx cannot read
    ahead) keeps one job per cell."""
    if defaults is None:
        return False
    chosen = {g: defaults[g] for g in ("hydra/launcher", "hydra/sweeper") if g in defaults}
    for o in overrides:
        if o.key_or_group in ("hydra/launcher", "hydra/sweeper"):
            chosen[o.key_or_group] = str(o.value())
        if o.is_sweep_override() and not o.is_discrete_sweep():
            return False
    return all(value == "basic" for value in chosen.values())


def swept(overrides: Sequence[Any]) -> list[str]:
    """The config keys (or groups) a command line sweeps, in order: what ``per_job`` would name."""
    names = [o.key_or_group.lstrip("+~").partition(".")[0] for o in overrides if o.is_sweep_override()]
    return list(dict.fromkeys(names))


def inner(overrides: Sequence[Any], names: list[str]) -> list[Any]:
    """The overrides a grouped job runs inside itself: those whose key (or its group) is named."""
    chosen = [o for o in overrides if o.key_or_group.lstrip("+~").partition(".")[0] in names]
    swept = {o.key_or_group.lstrip("+~").partition(".")[0] for o in chosen if o.is_sweep_override()}
    unswept = [n for n in names if n not in swept]
    if unswept:
        raise ConfigError(
            f"{KEY} names {', '.join(unswept)}, which this command line does not sweep; "
            f"name axes given as a=x,y (swept here: {', '.join(sorted(_swept(overrides))) or 'none'})"
        )
    return chosen


def group(argv: list[str], overrides: Sequence[Any], cells: list[list[str]], moved: list[Any]) -> list[str]:
    """``argv`` without the moved overrides and with one ``cells=`` carrying each cell's overrides."""
    text = json.dumps(cells, separators=(",", ":"))
    if "'" in text or "${" in text:
        raise ConfigError(f"{KEY}: a grouped value holds a quote or an interpolation; sweep it outside {KEY}")
    lines = {o.input_line for o in moved}
    return [a for a in argv if a not in lines] + [f"cells='{text}'"]


def _swept(overrides: Sequence[Any]) -> set[str]:
    return {o.key_or_group for o in overrides if o.is_sweep_override()}
