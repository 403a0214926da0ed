"""``python -m kvx.plugins``: every registered name per group, with its distribution and status."""

from __future__ import annotations

import argparse
import sys

from kvx.core.registry import BUILTIN_DIST, DISABLE_ENV, GROUPS, Entry, Registry, registry


def listing() -> str:
    lines: list[str] = []
    for kind, group in GROUPS.items():
        reg = registry(kind)
        lines.append(f"{group} ({len(reg.entries)})")
        if not reg.entries:
            lines.append("  (none registered)")
        width = max((len(e.name) for e in reg.entries), default=0)
        for e in sorted(reg.entries, key=lambda e: (e.name, e.dist)):
            detail = f"broken: {e.error}" if e.status == "broken" else "ok"
            lines.append(f"  {e.name:<{width}}  {e.dist} {e.version}  {detail}{_collision(reg, e)}")
    return "\n".join(lines)


def _collision(reg: Registry, entry: Entry) -> str:
    """How a plugin that shares its bare name is reached: a built-in keeps the bare name."""
    others = reg.collisions(entry)
    if entry.dist == BUILTIN_DIST or not others:
        return ""
    if any(e.dist == BUILTIN_DIST for e in others):
        return f"; shadowed by kvx's built-in, use {entry.qualified}"
    return f"; name shared with {', '.join(e.qualified for e in others)}, use {entry.qualified}"


def main(argv: list[str] | None = None) -> int:
    """The listing; ``--help`` says what the command does, and an argument it does not take is an error."""
    argparse.ArgumentParser(
        prog="python -m kvx.plugins",
        description="List every registered name per entry-point group (kvx.tasks, kvx.readers, ...) with "
        f"its distribution, version and status (ok, or broken and why). {DISABLE_ENV}=1 lists kvx's "
        "own names only.",
    ).parse_args(argv)
    print(listing())
    return 0


if __name__ == "__main__":
    sys.exit(main())
