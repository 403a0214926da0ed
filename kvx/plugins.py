"""``python -m kvx.plugins``: every registered name per group, with its distribution and where it points.

The listing reads the installed distributions' entry points and imports no plugin module, so a heavy
plugin (one that imports kvpress) or a broken one costs it nothing; ``--check`` imports each entry
and says ok, or broken and why.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from kvx.core import commands
from kvx.core.registry import BUILTIN_DIST, DISABLE_ENV, GROUPS, Entry, Registry, registry

PROG = "python -m kvx.plugins"
#: the last line of the plain listing
CHECK_HINT = f"(no plugin was imported: `{PROG} --check` imports each entry and says ok or broken and why)"


def listing(check: bool = False) -> str:
    """Per group, one line per entry: name, distribution and version, then the ``module:object`` it
    points to, or with ``check`` whether it imports (``ok``, or ``broken: why``)."""
    lines: list[str] = []
    for kind, group in GROUPS.items():
        reg = registry(kind)
        lines.append(f"{group} ({len(reg.entries)})")
        if not reg.entries:
            lines.append("  (none registered)")
        width = max((len(e.name) for e in reg.entries), default=0)
        for e in sorted(reg.entries, key=lambda e: (e.name, e.dist)):
            detail = _status(e) if check else e.entry_point.value
            lines.append(f"  {e.name:<{width}}  {e.dist} {e.version}  {detail}{_collision(reg, e)}")
    if not check:
        lines.append(CHECK_HINT)
    return "\n".join(lines)


def _status(entry: Entry) -> str:
    return f"broken: {entry.error}" if entry.status == "broken" else "ok"


def _collision(reg: Registry, entry: Entry) -> str:
    """How a plugin that shares its bare name is reached: a built-in keeps the bare name."""
    others = reg.collisions(entry)
    if entry.dist == BUILTIN_DIST or not others:
        return ""
    if any(e.dist == BUILTIN_DIST for e in others):
        return f"; shadowed by kvx's built-in, use {entry.qualified}"
    return f"; name shared with {', '.join(e.qualified for e in others)}, use {entry.qualified}"


def main(argv: Sequence[str] | None = None) -> int:
    """The listing; ``--help`` says what the command does, and an argument it does not take is an error."""
    return commands.run("kvx.plugins", _main, argv)


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="List every registered name per entry-point group (kvx.tasks, kvx.readers, ...) with "
        "its distribution, version and the module:object it points to, without importing any plugin. "
        f"{DISABLE_ENV}=1 lists kvx's own names only.",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="import every entry and show its status instead: ok, or broken and why (a plugin that "
        "imports a framework at import time makes this take seconds)",
    )
    args = parser.parse_args(argv)
    print(listing(check=args.check))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
