"""``python -m kvx.importers NAME PATH --out DIR``: convert published results into kvx records.

python -m kvx.importers kvdiagnosis path/to/KVDiagnosis --out imported/kvdiagnosis
python -m kvx.aggregate --records imported/kvdiagnosis
python -m kvx.importers tpbench path/to/TPBench --out imported/tpbench
python -m kvx.importers kvpress path/to/kvpress/results --out imported/kvpress

Bad input (an unknown importer, a missing PATH, a folder that is not the named release, an
unreadable file in it) is one ``kvx.importers: ...`` line on stderr and exit code 2. Exit code 1:
the import finished but some source rows could not be converted (listed in the manifest).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
from collections.abc import Sequence
from typing import NoReturn

from kvx.core import commands
from kvx.importers import IMPORTERS, BadInput

PROG = "python -m kvx.importers"


class _Parser(argparse.ArgumentParser):
    """Usage mistakes are one line on stderr, like every other bad input."""

    def error(self, message: str) -> NoReturn:
        raise BadInput(message)


def main(argv: Sequence[str] | None = None) -> int:
    """One import, in-process: its exit code (the module's docstring); bad input is one
    ``kvx.importers: ...`` line and 2, said in :func:`kvx.core.commands.run`."""
    return commands.run("kvx.importers", _main, argv, user_errors=(BadInput,))


def _main(argv: list[str]) -> int:
    known = ", ".join(sorted(IMPORTERS))
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        print(f"\nimporters: {known}; {PROG} NAME --help for its options")
        return 0
    if not argv:
        raise BadInput(f"give an importer: {PROG} NAME PATH --out DIR (importers: {known})")
    name = argv[0]
    if name not in IMPORTERS:
        close = difflib.get_close_matches(name, IMPORTERS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise BadInput(f"unknown importer {name!r} (known: {known}){hint}")
    module = importlib.import_module(IMPORTERS[name])
    parser = _Parser(prog=f"{PROG} {name}", description=(module.__doc__ or "").split("\n")[0])
    module.add_arguments(parser)
    return int(module.run(parser.parse_args(argv[1:])))


if __name__ == "__main__":
    raise SystemExit(main())
