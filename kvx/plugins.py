"""``python -m kvx.plugins``: every registered name per group, with its distribution and status."""

from __future__ import annotations

import sys

from kvx.registry import GROUPS, registry


def listing() -> str:
    lines: list[str] = []
    for kind, group in GROUPS.items():
        reg = registry(kind)
        lines.append(f"{group} ({len(reg.entries)})")
        if not reg.entries:
            lines.append("  (none registered)")
        width = max((len(e.name) for e in reg.entries), default=0)
        for e in sorted(reg.entries, key=lambda e: (e.name, e.dist)):
            status = e.status
            detail = f"broken: {e.error}" if status == "broken" else "ok"
            lines.append(f"  {e.name:<{width}}  {e.dist} {e.version}  {detail}")
    return "\n".join(lines)


def main() -> int:
    print(listing())
    return 0


if __name__ == "__main__":
    sys.exit(main())
