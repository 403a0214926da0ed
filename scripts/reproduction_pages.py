"""Write docs/reproduce/<paper>.md from docs/reproduce/<paper>.yaml: one page per paper, every numbered
table and figure with the command that makes it, its status and what backs that status.

The YAML is the one place a paper's reproduction status is declared; the page is generated so it
cannot drift from it (tests/test_reproduction_pages.py renders each spec and compares, and checks that
every table and figure is listed and every named test exists). After editing a spec:

    python scripts/reproduction_pages.py
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import jinja2
import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "docs" / "reproduce"

#: what a status means, as the page's legend says it
STATUSES = {
    "release": "reproduced from the release's own files, pinned by the tests named",
    "runnable": (
        "kvx runs it; the tests named run it at a small size here, "
        "and the paper's numbers need what the command is marked with"
    ),
    "not_reproducible": "kvx cannot make it, for the reason given",
    "not_a_result": "a description (scope, software, licences, examples), nothing to compute",
}
ITEM = re.compile(r"^(Table|Figure) (\d+)$")


def numbered(item: dict[str, Any]) -> list[tuple[str, int]]:
    """The paper's numbered tables and figures a row covers (its ``items``), as (kind, number)."""
    found = []
    for name in item["items"]:
        match = ITEM.match(name)
        if match:
            found.append((match.group(1), int(match.group(2))))
    return found


def _label(names: list[str]) -> str:
    """``["Table 13", "Table 14", "Figure 11", "§5.3"]`` as "Tables 13, 14; Figure 11; §5.3"."""
    groups: dict[str, list[str]] = {}
    others = []
    for name in names:
        match = ITEM.match(name)
        if match:
            groups.setdefault(match.group(1), []).append(match.group(2))
        else:
            others.append(name)
    kinds = [f"{kind}{'s' if len(n) > 1 else ''} {', '.join(n)}" for kind, n in groups.items()]
    return "; ".join(kinds + others)


def _plural(count: int, noun: str) -> str:
    """``3, "row"`` as "3 rows", ``1, "row"`` as "1 row"."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _needs(command: dict[str, Any]) -> str:
    return f"needs: {', '.join(command['needs'])}" if command.get("needs") else ""


def render(spec: dict[str, Any], name: str) -> str:
    """The Markdown page of one paper's spec (``name`` is the spec's file stem)."""
    commands = spec.get("commands", {})
    rows = []
    for item in spec["rows"]:
        named = item.get("command", [])
        named = [named] if isinstance(named, str) else named
        rows.append(
            {
                "label": _label(item["items"]),
                "title": item["title"],
                "output": item.get("output", "—"),
                "status": item["status"].replace("_", " "),
                "command_refs": [c for c in named if c in commands],
                "command_texts": [c for c in named if c not in commands],
                "needs_text": _needs(item),
                "backing": item.get("tests", []),
                "why": item.get("why", "—"),
                "differs": item.get("differs", "—"),
            }
        )
    counts = Counter(item["status"] for item in spec["rows"])
    others = [name for item in spec["rows"] for name in item["items"] if not ITEM.match(name)]
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["needs"] = _needs
    environment.filters["plural"] = _plural
    return environment.get_template("reproduction_page.md.j2").render(
        spec=spec, name=name, rows=rows, counts=counts, statuses=STATUSES, commands=commands, others=others
    )


def specs() -> dict[str, dict[str, Any]]:
    """Every paper's spec by file stem."""
    return {path.stem: yaml.safe_load(path.read_text()) for path in sorted(PAGES.glob("*.yaml"))}


def main() -> None:
    for name, spec in specs().items():
        (PAGES / f"{name}.md").write_text(render(spec, name))
        print(f"wrote docs/reproduce/{name}.md")


if __name__ == "__main__":
    main()
