"""``docs/report-sections.md``, written from the catalogue: each of kvx's report sections in report order,
the tables declared in it with the figures drawn from them, and its prose file included as it is.

``python -m kvx.aggregate.publish.sections_page docs/report-sections.md`` rewrites the page; a test
checks that the page in the repository is what this writes, so the docs' list of tables and sections
is the catalogue's.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kvx.aggregate.catalogue import Catalogue, load

INTRO = """\
# What the report says: each section and its tables

`report.html` explains each of its sections with the text below, and the Markdown file the aggregate
writes for each benchmark section it shows (`tpbench.md`, `kvdiagnosis.md`, `judges.md`, ...) opens
with it. Each text is one file, `kvx/aggregate/prose/{anchor}.md`, included here as it is: edit it
there, and the report, those files and this page change together. This page itself is written from the
aggregate's catalogue (`python -m kvx.aggregate.publish.sections_page docs/report-sections.md`), so its
sections, tables and figures are the ones `python -m kvx.aggregate` builds; `python -m kvx.aggregate
--list` prints the same with the tables of installed plugins. A package that adds a section ships its
text in its own package (`Section.prose_package`, [Writing a plugin](plugins.md#aggregate-tables)).

The sections come in the report's order. Those marked *always* are in every report (with a note when
they have nothing to show); the others only when their analysis found something (a table with rows or
a figure). Each table's columns are listed
in [Aggregate](aggregate.md#tables) and the pages of each study.
"""


def page(catalogue: Catalogue) -> str:
    """The page for ``catalogue``'s sections (kvx's own: ``load(figures=True, distributions=["kvx"])``)."""
    parts = [INTRO]
    for section in catalogue.sections:
        names = catalogue.in_section(section.anchor)
        listed = []
        for name in names:
            drawn = [f"`{f.key}`" for f in catalogue.figures_of(name)]
            listed.append(f"`{name}`" + (f" (figures: {', '.join(drawn)})" if drawn else ""))
        shown = "optional" if section.optional else "always"
        parts.append(
            f"## {section.heading}\n\n"
            f"Section `{section.anchor}` ({shown}). Tables: {', '.join(listed) or 'none'}.\n\n"
            f'--8<-- "{section.anchor}.md"\n'
        )
    return "\n".join(parts)


def main(argv: list[str]) -> int:
    """Write the page for kvx's own catalogue to ``argv[0]``."""
    Path(argv[0]).write_text(page(load(figures=True, distributions=["kvx"])), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
