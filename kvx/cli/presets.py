"""Experiment presets: ``+experiment=tpbench/main`` names ``conf/experiment/tpbench/main.yaml``.

A preset is written in Hydra's ``+experiment=`` convention (``# @package _global_``, ``override
/<group>: <option>`` in its defaults, plain keys, ``hydra.sweeper.params`` for the sweep axes and
``hydra.mode: MULTIRUN``), and kvx expands it into the command-line overrides it stands for before
anything else reads the command line. So a preset is exactly the command a user could have typed:
every job is checked before anything runs, grouped jobs share a process, a cell has one identity
whether it came from a preset or by hand, and anything given on the command line wins over the
preset's value for the same key.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from kvx.core.errors import ConfigError

GROUP = "experiment"
#: a preset whose ``suite`` lists other presets runs them one after another (``kvx.cli.suite``)
SUITE = "suite"
#: Hydra's flags that turn a command into a multirun, and those that exclude it (they run no job, or
#: one: a preset's sweep is then refused by Hydra as any typed sweep is)
MULTIRUN_FLAGS = ("-m", "--multirun")
SINGLE_FLAGS = ("-c", "--cfg", "-i", "--info", "-r", "--run", "-sc", "--shell-completion")


def names(config_dir: str) -> list[str]:
    """Every preset under ``<config_dir>/experiment``, as ``+experiment=`` takes it."""
    root = Path(config_dir) / GROUP
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yaml"))


def expand(argv: Sequence[str], config_dir: str) -> list[str]:
    """``argv`` with each ``+experiment=NAME`` replaced by the overrides of its preset (those whose
    key the command line does not set itself), plus ``--multirun`` when the preset is a sweep."""
    given = {_key(a) for a in argv if _is_override(a) and not _is_preset(a)}
    out: list[str] = []
    multirun = False
    for arg in argv:
        if not (_is_override(arg) and _is_preset(arg)):
            out.append(arg)
            continue
        name = arg.partition("=")[2]
        preset = load(config_dir, name)
        if SUITE in preset:
            raise ConfigError(
                f"+experiment={name} is a suite of {len(preset[SUITE])} sweeps ({', '.join(preset[SUITE])}): "
                "it runs only as `python -m kvx +experiment=...`; give one of its parts to inspect it"
            )
        overrides, sweep = overrides_of(preset)
        out += [o for o in overrides if _key(o) not in given]
        multirun |= sweep
    if (
        multirun
        and not any(a in (*MULTIRUN_FLAGS, *SINGLE_FLAGS) for a in out)
        and "hydra.mode=MULTIRUN" not in out
    ):
        out.insert(0, "--multirun")
    return out


def load(config_dir: str, name: str) -> DictConfig:
    """The preset's file, or one clear line naming the presets there are."""
    path = Path(config_dir) / GROUP / f"{name}.yaml"
    if not name or not path.is_file():
        known = names(config_dir)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"+experiment={name!r} is not a preset (presets: {', '.join(known)}){hint}")
    node = OmegaConf.load(path)
    if not isinstance(node, DictConfig):
        raise ConfigError(f"+experiment={name}: {path} is not a mapping of keys")
    return node


def overrides_of(preset: DictConfig) -> tuple[list[str], bool]:
    """The command-line overrides a preset stands for, and whether it is a sweep."""
    body = OmegaConf.to_container(preset, resolve=False)
    assert isinstance(body, dict)
    hydra = body.pop("hydra", None) or {}
    mode = hydra.pop("mode", None)
    sweeper = hydra.get("sweeper") or {}
    params = sweeper.pop("params", None) or {}
    if not sweeper:
        hydra.pop("sweeper", None)
    out: list[str] = []
    for item in body.pop("defaults", None) or []:
        if not isinstance(item, dict) or len(item) != 1:
            raise ConfigError(f"experiment preset defaults must be 'override /<group>: <option>', got {item}")
        key, value = next(iter(item.items()))
        group = str(key).removeprefix("override").strip().lstrip("/")
        if group not in params:  # a swept group's default only makes Hydra's primary config composable
            out.append(f"{group}={_render(value)}")
    out += [f"{key}={value}" for key, value in _flat(body)]
    out += [f"hydra.{key}={value}" for key, value in _flat(hydra)]
    out += [f"{key}={value}" for key, value in params.items()]  # sweeps stay in Hydra's sweep syntax
    return out, mode == "MULTIRUN" or bool(params)


def _flat(node: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for key, value in node.items():
        if isinstance(value, dict) and value:
            out += _flat(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", _render(value)))
    return out


def _render(value: Any) -> str:
    """A value in Hydra's override grammar (quoted where a bare string would parse as something else)."""
    if isinstance(value, (ListConfig, DictConfig)):
        value = OmegaConf.to_container(value, resolve=False)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ",".join(_render(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_render(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if text and all(c.isalnum() or c in "_-./:@" for c in text) and text not in ("null", "true", "false"):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _is_override(arg: str) -> bool:
    return "=" in arg and not arg.startswith("-")


def _is_preset(arg: str) -> bool:
    return arg.partition("=")[0].lstrip("+") == GROUP


def _key(arg: str) -> str:
    return arg.partition("=")[0].lstrip("+~")


def suite(argv: Sequence[str], config_dir: str) -> list[tuple[str, list[str]]] | None:
    """For a command naming a suite preset: each part's name and command line, in order; else None.

    A part's command line is the user's, less the suite and any ``PART:KEY=VALUE`` meant for another
    part, plus the suite's own overrides (where the command line does not set the key) and
    ``+experiment=<part>``; so the command line wins over the suite, and the suite over the part.
    """
    chosen = [a for a in argv if _is_override(a) and _is_preset(a)]
    suites = [(a, load(config_dir, a.partition("=")[2])) for a in chosen]
    suites = [(a, node) for a, node in suites if SUITE in node]
    if not suites:
        return None
    if len(chosen) > 1:
        raise ConfigError(f"{suites[0][0]} is a suite: it runs alone, not with {', '.join(chosen[1:])}")
    if any(a in SINGLE_FLAGS for a in argv):
        raise ConfigError(f"{suites[0][0]} is a suite of sweeps: give one of its parts with --cfg/--info")
    arg, node = suites[0]
    body = OmegaConf.to_container(node, resolve=False)
    assert isinstance(body, dict)
    parts = body.pop(SUITE)
    if not isinstance(parts, list) or not parts or not all(isinstance(p, str) for p in parts):
        raise ConfigError(f"{arg}: {SUITE} must be a non-empty list of preset names, got {parts!r}")
    for part in parts:
        if SUITE in load(config_dir, part):
            raise ConfigError(f"{arg}: part {part!r} is itself a suite (suites do not nest)")
    short = {part.rsplit("/", 1)[-1]: part for part in parts}
    scoped = [a for a in argv if _scope(a) is not None]
    for a in scoped:
        if _scope(a) not in short:
            close = difflib.get_close_matches(_scope(a) or "", list(short), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{a}: {arg} has no part {_scope(a)!r} (parts: {', '.join(short)}){hint}")
    common = [a for a in argv if a != arg and a not in scoped]
    own, _ = overrides_of(OmegaConf.create(body))
    out = []
    for name, part in short.items():
        mine = [a.partition(":")[2] for a in scoped if _scope(a) == name]
        given = {_key(a) for a in common + mine if _is_override(a)}
        line = [*common, *mine, *(o for o in own if _key(o) not in given), f"+{GROUP}={part}"]
        out.append((part, line))
    return out


def _scope(arg: str) -> str | None:
    """``qasper`` for ``qasper:task.path=FILE`` (an override meant for one part of a suite)."""
    head, colon, _ = arg.partition(":")
    if not colon or "=" in head or arg.startswith("-") or "=" not in arg:
        return None
    return head
