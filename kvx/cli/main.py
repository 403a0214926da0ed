"""``python -m kvx``: Hydra's application, run in-process by ``main(argv) -> int``.

Hydra parses the command line, composes the config (``--config-dir``, ``hydra.searchpath``, presets
as ``+experiment=``, ``--cfg``, ``--info``, ``--hydra-help`` and shell completion are Hydra's own;
``--help`` fills Hydra's help template over kvx's groups, ``kvx.cli.help``), and runs kvx's sweeper
(``kvx.cli.sweeper``) or, for a single run, the job after kvx's callback checked it.
Here is the one place that turns how a command ended into a line and an exit code: bad input is one
``kvx: ...`` line and 2, Ctrl-C 130 with what was kept, a failure on good input its own code.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence

from kvx.cli.errors import Stop, explain
from kvx.cli.help import HELP
from kvx.core.commands import BAD_INPUT, INTERRUPTED, Failed

#: Hydra flags that take a value (``-cd DIR``), which is not an override even with a ``=`` in it
#: (``--info``'s values have none)
VALUED = {
    "-cd",
    "--config-dir",
    "-cp",
    "--config-path",
    "-cn",
    "--config-name",
    "-p",
    "--package",
    "-c",
    "--cfg",
    "-sc",
    "--shell-completion",
    "--experimental-rerun",
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``python -m kvx ARGV`` in this process and return its exit code."""
    from kvx.cli.session import Session

    args = list(sys.argv[1:] if argv is None else argv)
    session = Session()
    try:
        args = command_line(args)
        at = set(override_positions(args))
        if any(arg in HELP for i, arg in enumerate(args) if i not in at):
            from kvx.cli.help import help_text

            print(help_text([args[i] for i in sorted(at)], search_path(args)))
            return 0
        with _argv(args), _hydra_errors_raised():
            _application(session)()
    except SystemExit as exc:  # Hydra's own exits (argparse usage errors, --help)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        print(
            f"\nkvx: interrupted; {session.finished} cell(s) finished by this process are kept in the "
            "tracking store and the cell in progress is marked KILLED; rerun the same command to resume "
            "(finished cells are reused)",
            file=sys.stderr,
            flush=True,
        )
        return INTERRUPTED
    except Failed as exc:
        print(f"kvx: {exc}", file=sys.stderr)
        return exc.code
    except (Exception, Stop) as exc:
        line = explain(exc, search_path(args))
        if line is None:  # not about the input: a bug, with its traceback
            if isinstance(exc, Stop):
                raise exc.error from None
            raise
        print(f"kvx: {line}", file=sys.stderr)
        return BAD_INPUT
    return 0


def _application(session: object):  # noqa: ANN202 - Hydra's decorated entry point
    import hydra
    from omegaconf import DictConfig

    from kvx.core.conf import conf_dir

    @hydra.main(version_base="1.3", config_path=conf_dir(), config_name="config")
    def kvx(cfg: DictConfig) -> dict[str, float]:
        from kvx.core import lean_imports

        lean_imports.install()  # before kvx.cli.app imports transformers: hqq and sklearn load only if used
        from kvx.cli.app import run

        return run(cfg, session)  # type: ignore[arg-type]

    return kvx


def command_line(args: list[str]) -> list[str]:
    """Three kvx spellings Hydra's grammar lacks, rewritten into Hydra's:

    - ``PART:KEY=VALUE`` (an override for one part of a suite preset) becomes the sweeper's
      ``hydra.sweeper.scoped.PART``;
    - ``press.base=tova`` (a wrapper's slot chosen like a field) becomes the nested group choice
      ``press/base=tova``, sweeps included (``-m press.base=snapkv,tova``);
    - a field of a swept group (``task=a,b task.corpus=sgd``, or any group's under ``+experiment=a,b``)
      is passed as ``++task.corpus=sgd``: Hydra composes a multirun's primary config with the group's
      default option, which may not have the field; every cell is composed with its own option and
      checked by the sweeper.
    """
    from kvx.cli.compose import parse
    from kvx.cli.sources import GROUPS, kind_of

    out, scoped, positions = [], {}, []
    at = set(override_positions(args))
    for i, arg in enumerate(args):
        if i not in at:
            out.append(arg)
            continue
        head, colon, rest = arg.partition(":")
        if colon and "=" not in head and "=" in rest and head.isidentifier():
            scoped.setdefault(head, []).append(rest)
            continue
        positions.append(len(out))
        out.append(arg)
    parsed = parse([out[i] for i in positions])
    for i, o in zip(positions, parsed):
        if o.package is None and "." in o.key_or_group and kind_of(o.key_or_group.replace(".", "/")):
            out[i] = o.input_line.replace(o.key_or_group, o.key_or_group.replace(".", "/"), 1)
            o.key_or_group = o.key_or_group.replace(".", "/")
    swept = {o.key_or_group for o in parsed if o.is_sweep_override()}
    groups = {g for g in swept if kind_of(g)}
    swept = set(GROUPS) | groups if "experiment" in swept else groups  # a preset may choose any group
    for i, o in zip(positions, parsed):
        if "." in o.key_or_group and any(o.key_or_group.startswith(g.replace("/", ".") + ".") for g in swept):
            out[i] = "++" + out[i].lstrip("+")
    for part, lines in scoped.items():
        quoted = ",".join("'" + line.replace("\\", "\\\\").replace("'", "\\'") + "'" for line in lines)
        out.append(f"++hydra.sweeper.scoped.{part}=[{quoted}]")
    return out


def override_positions(args: Sequence[str]) -> list[int]:
    """Where a command line's overrides are: every argument that is not a flag or a flag's value."""
    out, skip = [], False
    for i, arg in enumerate(args):
        if skip or arg.startswith("-") or "=" not in arg:
            skip = not skip and arg in VALUED
        else:
            out.append(i)
    return out


def search_path(args: Sequence[str]) -> list[str]:
    """The config folders a command adds to Hydra's search path (``--config-dir``, ``hydra.searchpath``)."""
    out = []
    for flag, value in zip(args, [*args[1:], ""]):
        if flag in ("-cd", "--config-dir"):
            out.append(f"file://{os.path.abspath(value)}")
        elif flag.startswith(("--config-dir=", "-cd=")):
            out.append(f"file://{os.path.abspath(flag.partition('=')[2])}")
        elif flag.lstrip("+").startswith("hydra.searchpath="):
            out.extend(
                p.strip().strip("'\"") for p in flag.partition("=")[2].strip("[]").split(",") if p.strip()
            )
    return out


@contextlib.contextmanager
def _argv(args: list[str]) -> Iterator[None]:
    """Hydra's entry point reads ``sys.argv``: it sees ``args`` while it runs."""
    saved = sys.argv
    sys.argv = [saved[0] if saved else "kvx", *args]
    try:
        yield
    finally:
        sys.argv = saved


@contextlib.contextmanager
def _hydra_errors_raised() -> Iterator[None]:
    """``HYDRA_FULL_ERROR=1`` while Hydra runs: its errors reach ``main`` as exceptions (said here in one
    line) instead of being printed over several lines with exit code 1."""
    saved = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = saved
