"""``python -m kvx.importers NAME PATH --out DIR``: convert published results into kvx records.

python -m kvx.importers kvdiagnosis path/to/KVDiagnosis --out imported/kvdiagnosis
python -m kvx.aggregate --records imported/kvdiagnosis
python -m kvx.importers tpbench path/to/TPBench --out imported/tpbench

Bad input (an unknown importer, a missing PATH, a folder that is not the named release, an
unreadable file in it) is one ``kvx.importers: ...`` line on stderr and exit code 2. Exit code 1:
the import finished but some source rows could not be converted (listed in the manifest).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
from typing import NoReturn

from kvx.importers import IMPORTERS, BadInput

PROG = "python -m kvx.importers"


class _Parser(argparse.ArgumentParser):
    """Usage mistakes are one line on stderr, like every other bad input."""

    def error(self, message: str) -> NoReturn:
        print(f"kvx.importers: {message}", file=sys.stderr)
        raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    known = ", ".join(sorted(IMPORTERS))
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        print(f"\nimporters: {known}; {PROG} NAME --help for its options")
        return 0
    if not argv:
        print(
            f"kvx.importers: give an importer: {PROG} NAME PATH --out DIR (importers: {known})",
            file=sys.stderr,
        )
        return 2
    name = argv[0]
    if name not in IMPORTERS:
        close = difflib.get_close_matches(name, IMPORTERS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        print(f"kvx.importers: unknown importer {name!r} (known: {known}){hint}", file=sys.stderr)
        return 2
    module = importlib.import_module(IMPORTERS[name])
    parser = _Parser(prog=f"{PROG} {name}", description=(module.__doc__ or "").split("\n")[0])
    module.add_arguments(parser)
    try:
        args = parser.parse_args(argv[1:])
        return int(module.run(args))
    except SystemExit as exc:  # the parser's one line (or --help) already went out
        return int(exc.code or 0)
    except BadInput as exc:
        print(f"kvx.importers: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
