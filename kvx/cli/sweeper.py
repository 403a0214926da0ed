"""What ``hydra/sweeper=kvx`` adds to Hydra's basic sweeper (``hydra_plugins.kvx.plugins.KvxSweeper``).

1. **Every cell checked first.** The sweep is expanded by Hydra's parser and ``split_arguments``
   (``glob()``, ``range()``, presets' ``hydra.sweeper.params`` included); each cell is composed
   (``kvx.cli.compose``) and built (``kvx.cli.cells``: values, plugins' ``validate()``, tokenizer-only
   checks such as a task's shortest prompt); then each tracking store and served model answers once.
   Any error is one line before a folder or a store exists.
2. **Cells grouped into jobs.** Under the basic launcher every cell runs in this process as one job
   (cells that share a split share its prefills and a batched decode); under a parallel launcher one
   job per cell, or per combination of the axes ``per_job`` does not name. A grouped job carries its
   cells in one ``cells='<json>'`` override, so its command line is still the whole truth.
3. **The sweep's MLflow parent run** (``kvx.cli.sweep_run``), with the exact planned cell count.
4. **Suites**: a preset whose ``suite`` lists presets (or ``+experiment=a,b``, ``glob(...)``) runs
   each as its own sweep over its own axes, after every part's cells are checked. Overrides on the
   command line apply to every part, ``PART:KEY=VALUE`` (``hydra.sweeper.scoped``) to one; the
   command line wins over ``suite_overrides``, and those over the part's own values.
5. ``hydra.sweeper.plan=true`` (or ``json``) prints the cells and jobs and runs nothing.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from kvx.cli.compose import Composer, parse
from kvx.core.errors import ConfigError

PER_JOB = "per_job"
EXPERIMENT = "experiment"


@dataclass
class Cell:
    overrides: list[str]
    label: str
    setting: str


@dataclass
class Plan:
    """One sweep: its cells, in Hydra's order, and the jobs that run them."""

    name: str | None
    arguments: list[str]
    cells: list[Cell] = field(default_factory=list)
    jobs: list[list[str]] = field(default_factory=list)


def sweep(sweeper: Any, arguments: list[str]) -> list[Any]:
    config = sweeper.config
    started = time.perf_counter()
    composer = Composer.of_hydra(config.hydra)
    plans = [plan(sweeper, name, lines, composer) for name, lines in parts(sweeper, arguments)]
    if sweeper.plan:
        show(plans, sweeper.plan, time.perf_counter() - started)
        return []
    from kvx.cli.sweep_run import SweepRun  # MLflow: only once the plan holds

    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(config, sweep_dir / "multirun.yaml")
    returns, index = [], 0
    for i, p in enumerate(plans, 1):
        if p.name is not None:
            print(f"kvx: suite part {i}/{len(plans)}: +experiment={p.name}", file=sys.stderr, flush=True)
        with SweepRun(config, p.arguments, [c.setting for c in p.cells]):
            results = sweeper.launcher.launch(p.jobs, initial_job_idx=index)
            for r in results:
                _ = r.return_value  # a failed job raises its error here
        index += len(p.jobs)
        returns.append(results)
    return returns


def parts(sweeper: Any, arguments: list[str]) -> list[tuple[str | None, list[str]]]:
    """The sweeps to run: this one (its preset's params, then the command line), or a suite's parts."""
    config = sweeper.config
    suite = list(config.get("suite") or [])
    own = sweeper._parse_config()  # BasicSweeper's: hydra.sweeper.params as overrides
    swept = _swept_presets(sweeper, arguments)
    if swept:  # -m +experiment=a,b: each preset its own sweep over its own axes, as a suite's parts
        suite, arguments = swept, [a for a in arguments if not _is_experiment(a)]
    if not suite:
        if sweeper.scoped:
            raise ConfigError(f"{_scoped_lines(sweeper.scoped)[0]}: PART:KEY=VALUE is for a suite's parts")
        return [(None, [*own, *arguments])]
    short = {part.rsplit("/", 1)[-1]: part for part in suite}
    if len(short) < len(suite):
        short = {part: part for part in suite}
    for name in sweeper.scoped:
        if name not in short:
            import difflib

            close = difflib.get_close_matches(name, list(short), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise ConfigError(f"{name}:...: the suite has no part '{name}' (parts: {', '.join(short)}){hint}")
    common = [a for a in arguments if not _is_experiment(a)]
    given = {_key(a) for a in common}
    extra = [*own, *(str(o) for o in config.get("suite_overrides") or [])]
    extra = [o for o in extra if _key(o) not in given]
    out = []
    for name, part in short.items():
        preset = _preset(config.hydra, part)
        if preset.get("suite"):
            raise ConfigError(f"+experiment={part}: a suite's part is itself a suite (suites do not nest)")
        params = [f"{k}={v}" for k, v in (preset.hydra.sweeper.get("params") or {}).items()]
        mine = [str(o) for o in sweeper.scoped.get(name, [])]
        taken = {_key(o) for o in [*extra, *common, *mine]}
        lines = [
            *(p for p in params if _key(p) not in taken),
            *extra,
            *common,
            *mine,
            f"+{EXPERIMENT}={part}",
        ]
        out.append((part, lines))
    return out


def _swept_presets(sweeper: Any, arguments: list[str]) -> list[str]:
    """The presets of ``+experiment=a,b`` (or ``glob(...)``) on the command line, in Hydra's order."""
    from hydra.core.override_parser.types import Glob

    from kvx.cli.sources import configs_under

    lines = [a for a in arguments if _is_experiment(a)]
    loader = sweeper.hydra_context.config_loader
    overrides = parse(lines, loader)
    if not any(o.is_sweep_override() for o in overrides):
        return []
    value = overrides[-1].value()
    if isinstance(value, Glob):  # Hydra's glob lists a group's own folder; presets sit in subfolders
        own = [str(o) for o in sweeper.config.hydra.overrides.hydra]
        names = value.filter(configs_under(loader, EXPERIMENT, own))
        if not names:
            raise ConfigError(f"{overrides[-1].input_line}: matches no preset")
        return names
    expanded = sweeper.split_arguments(overrides[-1:], None)[0]
    return [line[0].partition("=")[2] for line in expanded]


def _preset(hydra_node: Any, part: str) -> Any:
    """A suite part's preset composed alone (with the command's ``hydra.*`` overrides), for its sweep axes."""
    from hydra import compose
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from kvx.cli.errors import explain

    try:
        own = [str(o) for o in hydra_node.overrides.hydra]
        name = str(hydra_node.job.config_name)
        return compose(name, overrides=[*own, f"+{EXPERIMENT}={part}"], return_hydra_config=True)
    except (HydraException, OmegaConfBaseException, OSError) as exc:
        raise ConfigError(f"+{EXPERIMENT}={part}: {explain(exc) or exc}") from None


def plan(sweeper: Any, name: str | None, lines: list[str], composer: Composer) -> Plan:
    """Expand, compose and check every cell, then group the cells into jobs."""
    from hydra.errors import HydraException

    from kvx.cli.cells import build_cell, check_fit, setting_digest
    from kvx.cli.preflight import check_services

    overrides = parse(lines, sweeper.hydra_context.config_loader)
    for o in overrides:
        if o.key_or_group == PER_JOB and o.is_sweep_override():
            axes = o.input_line.partition("=")[2]
            raise ConfigError(
                f"{o.input_line} is a sweep: name the axes one job holds as a list, per_job=[{axes}]"
            )
    try:
        expanded = sweeper.split_arguments(overrides, None)[0]  # BasicSweeper's product of the axes
    except HydraException as exc:
        from kvx.core.errors import one_line

        raise ConfigError(one_line(exc)) from None
    out = Plan(name, lines)
    configs, built, seen = [], [], {}
    where = f"+experiment={name}: " if name else ""
    try:
        from tqdm import tqdm

        progress = tqdm(expanded, desc="kvx: checking cells", unit="cell", disable=len(expanded) < 50)
        for cell_lines in progress:  # every value first: a bad one fails before any tokenizer loads
            cfg, typed = composer(cell_lines)
            cell, reader, names = build_cell(cfg, typed)
            label = f"{cell.task_name}|{reader.label(names['reader'])}|{cell.label()}|seed={cell.seed}"
            setting = setting_digest(cfg, names, cell.compressor)
            if setting in seen:  # one setting, one cell: a YAML option and its fields typed out
                print(
                    f"kvx: {' '.join(cell_lines)} is the same cell as {seen[setting]}: run once",
                    file=sys.stderr,
                )
                continue
            seen[setting] = " ".join(cell_lines)
            out.cells.append(Cell(list(cell_lines), label, setting))
            configs.append(cfg)
            built.append((cell, reader, names))
        if not configs:
            raise ConfigError(f"{' '.join(lines)}: the sweep has no cells")
        out.jobs = jobs(out.cells, configs[0].get(PER_JOB) or [], _in_one_process(sweeper.config))
        check_services(configs)  # a store or server that does not answer, before any tokenizer loads
        for one in built:
            check_fit(*one)
    except ConfigError as exc:
        raise ConfigError(f"{where}{exc}") from None
    return out


def _in_one_process(config: Any) -> bool:
    """Hydra's basic launcher runs every job in this process, one after another."""
    target = str(config.hydra.launcher.get("_target_", ""))
    return target.endswith(".BasicLauncher")


def jobs(cells: list[Cell], per_job: list[str], one_process: bool) -> list[list[str]]:
    """Each job's overrides: the cells' shared ones, and ``cells='<json>'`` with what differs."""
    if not cells:
        return []
    keyed = [[(_key(o), o) for o in c.overrides] for c in cells]
    varying = {k for k, o in keyed[0] if any(dict(other).get(k) != o for other in keyed[1:])}
    varying |= {k for other in keyed[1:] for k, _ in other} - {k for k, _ in keyed[0]}
    roots = {_root(k) for k in varying}
    if per_job:
        names = [str(n) for n in per_job]
        unswept = [n for n in names if n not in roots]
        if unswept:
            raise ConfigError(
                f"{PER_JOB} names {', '.join(unswept)}, which this sweep does not sweep; name axes given "
                f"as a=x,y (swept here: {', '.join(sorted(roots)) or 'none'})"
            )
        inner = set(names)
    elif one_process:
        inner = roots
    else:
        return [list(c.overrides) for c in cells]
    groups: dict[tuple[str, ...], list[list[str]]] = {}
    for pairs in keyed:
        outer = tuple(o for k, o in pairs if _root(k) not in inner)
        groups.setdefault(outer, []).append([o for k, o in pairs if _root(k) in inner])
    out = []
    for outer, members in groups.items():
        if len(members) == 1:
            out.append([*outer, *members[0]])
            continue
        text = json.dumps(members, separators=(",", ":"))
        if "'" in text or "${" in text:
            raise ConfigError(
                f"{PER_JOB}: a grouped value holds a quote or an interpolation; sweep it outside {PER_JOB}"
            )
        out.append([*outer, f"cells='{text}'"])
    return out


def show(plans: list[Plan], mode: Any, seconds: float) -> None:
    """The plan on standard output: a line per cell and per job, or one JSON object."""
    if str(mode).lower() == "json":
        body = [
            {
                "part": p.name,
                "cells": [
                    {"label": c.label, "setting": c.setting, "overrides": c.overrides} for c in p.cells
                ],
                "jobs": p.jobs,
            }
            for p in plans
        ]
        print(json.dumps({"sweeps": body, "checked_s": round(seconds, 3)}, indent=1))
        return
    for p in plans:
        head = f"+experiment={p.name}: " if p.name else ""
        print(f"{head}{len(p.cells)} cell(s) in {len(p.jobs)} job(s), all checked ({seconds:.1f} s)")
        for c in p.cells:
            print(f"  cell {c.label}")
        for i, j in enumerate(p.jobs):
            print(f"  job {i}: {' '.join(j)[:400]}")


def _key(line: str) -> str:
    return line.partition("=")[0].lstrip("+~")


def _root(key: str) -> str:
    return key.partition(".")[0]


def _is_experiment(line: str) -> bool:
    return _key(line) == EXPERIMENT


def _scoped_lines(scoped: dict[str, Any]) -> list[str]:
    return [f"{name}:{o}" for name, lines in scoped.items() for o in lines]
