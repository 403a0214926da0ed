"""``python -m kvx.plugins``: every registered name per group, with its distribution and status."""

from __future__ import annotations

import sys

from kvx.core.registry import BUILTIN_DIST, GROUPS, Entry, Registry, registry


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


def main() -> int:
    print(listing())
    return 0


if __name__ == "__main__":
    sys.exit(main())
