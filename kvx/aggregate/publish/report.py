"""Tables (CSV + Markdown) and the single self-contained HTML report of ``python -m kvx.aggregate``.

CSV keeps full precision for re-analysis; Markdown and HTML share one display formatting so the
two never disagree: rates in percent, counts as integers, p-values in 3 significant digits, and
every undefined value as "N/A" (never 0).

The page is the Jinja2 template ``templates/report.html.j2`` (autoescaped) with ``report.css`` and
``sort.js`` inlined; each section's explanation is the Markdown file ``{anchor}.md`` of its prose
package (:func:`prose`, kvx's own in :mod:`kvx.aggregate.prose`), rendered with markdown-it-py. Each
figure stands below the table it draws.
"""

from __future__ import annotations

import base64
import mimetypes
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pandas as pd
from pandas.api.types import is_bool_dtype, is_integer_dtype, is_numeric_dtype

from kvx.aggregate.catalogue import Catalogue, Section, load

__all__ = [
    "Placed",
    "Report",
    "markdown_table",
    "placed",
    "prose",
    "write_html",
    "write_section_markdown",
    "write_tables",
]

NA = "N/A"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MAX_HTML_ROWS = 2000  # the CSV always holds every row; this keeps report.html openable

# Column kinds by name: the analysis frames store fractions in [0, 1] under these tokens.
_P_VALUE = re.compile(r"(^p$|^p_|_p$|_pvalue$)")
_PERCENT = re.compile(
    r"(^|_)(rate|share|quality|accuracy|retention|rescue|damage|reversal|excess|kept|agreement)(_|$)"
    r"|^(anchor|structural)_(full|comp)$|^judge\..+\.accuracy$"
)
_COUNT = re.compile(
    r"(^n_|_n$|\.n_judged$|_draws$|^(rows|intersection|union|eligible_pairs|evidence_only|sham_only)$|^(repaired|degraded)_)"
)


@dataclass(frozen=True)
class Placed(Section):
    """A catalogue section as the report places it: with the tables declared in it and the figures
    drawn from them. How to read their numbers is the Markdown file ``{anchor}.md`` in ``prose_package``
    (:func:`prose`). An ``optional`` section is shown (and written as ``{anchor}.md`` beside the tables)
    only when it has a table with rows or a figure; any other shows ``empty`` when it has none."""

    tables: tuple[str, ...] = ()
    figures: tuple[str, ...] = ()

    @property
    def explanation(self) -> str:
        return prose(self)


@dataclass(frozen=True)
class Report:
    """What the report shows, from the catalogue: its sections in order, each figure's table, the part
    of a table the page shows (the CSV holds all) and the display kind of columns whose name misleads."""

    sections: tuple[Placed, ...]
    figure_table: Mapping[str, str]
    shown: Mapping[str, Callable[[pd.DataFrame], pd.DataFrame]]
    display: Mapping[str, Mapping[str, str]]

    @classmethod
    def of(cls, catalogue: Catalogue) -> Report:
        sections = []
        for section in catalogue.sections:
            tables = tuple(catalogue.in_section(section.anchor))
            figures = tuple(f.key for f in catalogue.figures if f.table in tables)
            sections.append(Placed(**asdict(section), tables=tables, figures=figures))
        producers = catalogue.tables()
        return cls(
            tuple(sections),
            {f.key: f.table for f in catalogue.figures},
            {p.names[0]: p.shown for p in producers if p.shown is not None},
            {name: p.display for p in producers if p.display for name in p.names},
        )


def placed(catalogue: Catalogue | None = None) -> tuple[Placed, ...]:
    """Every section of ``catalogue`` (default: every installed package's, figures included) in report
    order."""
    return Report.of(catalogue or load(figures=True)).sections


def prose(section: Section) -> str:
    """The Markdown explaining ``section``: ``{anchor}.md`` in its ``prose_package``, "" when it has none."""
    file = resources.files(section.prose_package) / f"{section.anchor}.md"
    return file.read_text(encoding="utf-8") if file.is_file() else ""


def markdown_table(frame: pd.DataFrame, display: Mapping[str, str] | None = None) -> str:
    """A GitHub Markdown table in display formatting (written here: ``tabulate`` is not a dependency);
    ``display`` gives the kind of columns whose name would mislead the rule (:func:`_kind`)."""
    if frame.columns.empty:
        return "_(empty table)_\n"
    headers, numeric, rows = _display(frame, display)
    lines = [
        _md_row(headers),
        _md_row(["---:" if n else "---" for n in numeric]),
        *(_md_row(row) for row in rows),
    ]
    return "\n".join(lines) + "\n"


def write_tables(
    tables: Mapping[str, pd.DataFrame], out: Path, report: Report | None = None
) -> dict[str, tuple[Path, Path]]:
    """Write ``{name}.csv`` (full precision, NaN empty) and ``{name}.md`` for every table.

    Floats are written as shortest round-trip reprs; ``pd.read_csv(..., float_precision="round_trip")``
    reads them back bit for bit (pandas' default parser can be off by one ulp).
    """
    display = {} if report is None else report.display
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, frame in tables.items():
        csv_path, md_path = out / f"{name}.csv", out / f"{name}.md"
        _integral_counts(frame, display.get(name)).to_csv(csv_path, index=False, na_rep="")
        md_path.write_text(markdown_table(frame, display.get(name)), encoding="utf-8")
        written[name] = (csv_path, md_path)
    return written


def write_html(
    tables: Mapping[str, pd.DataFrame],
    figures: Mapping[str, Sequence[Path]],
    out: Path,
    title: str,
    meta: Mapping[str, str],
    report: Report | None = None,
) -> Path:
    """Write one self-contained ``report.html``: inline CSS, base64 images (lazily decoded, sized from
    their PNG headers) and one small inline script that sorts tables by a clicked header; no remote
    links, so the page works offline from ``file://``.

    ``report`` (default: the installed catalogue's) orders the sections (an optional one only with
    content); tables in none of them follow under "Other tables". Each figure stands below the table it
    draws, at its section's top when that table has no rows. Tables link to their CSV and Markdown
    files in ``out`` by relative href when those files exist.
    """
    report = report or Report.of(load(figures=True))
    out.mkdir(parents=True, exist_ok=True)
    present = [s for s in report.sections if not s.optional or _has_content(s, tables, figures)]
    in_sections = {name for section in report.sections for name in section.tables} | {"problems"}
    other = [
        _table_view(name, frame, out, report.display.get(name))
        for name, frame in tables.items()
        if name not in in_sections
    ]
    toc = [("validation", "Validation"), *((s.anchor, s.heading) for s in present)]
    if other:
        toc.append(("other", "Other tables"))
    page = (
        _environment()
        .get_template("report.html.j2")
        .render(
            title=title,
            meta=meta,
            toc=toc,
            validation=_validation_view(tables.get("problems", pd.DataFrame()), out),
            sections=[_section_view(s, tables, figures, out, report) for s in present],
            other=other,
            css=_asset("report.css"),
            script=_asset("sort.js"),
        )
    )
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


def write_section_markdown(
    tables: Mapping[str, pd.DataFrame],
    figures: Mapping[str, Sequence[Path]],
    out: Path,
    report: Report | None = None,
) -> list[Path]:
    """Write ``{anchor}.md`` for every optional section with content: its heading, its prose, its
    tables in display formatting each followed by its figures (relative links; figures of a table not
    written come first), readable without the HTML report."""
    report = report or Report.of(load(figures=True))
    written = []
    for section in report.sections:
        if not section.optional or not _has_content(section, tables, figures):
            continue
        present = {name for name in section.tables if name in tables}
        top, beside = _place(section, figures, report.figure_table, present)
        parts = [f"# {section.heading}\n", f"{prose(section).strip()}\n"]
        parts.extend(_markdown_image(path) for path in top)
        for name in section.tables:
            if name in tables:
                parts.append(f"## {name}\n\n" + markdown_table(tables[name], report.display.get(name)))
                parts.extend(_markdown_image(path) for path in beside.get(name, ()))
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{section.anchor}.md"
        path.write_text("\n".join(parts), encoding="utf-8")
        written.append(path)
    return written


def _has_content(
    section: Placed, tables: Mapping[str, pd.DataFrame], figures: Mapping[str, Sequence[Path]]
) -> bool:
    """A table with rows or a figure: an optional section whose analysis found nothing (the audit's controls
    after a one-reader sweep) stays out of the page and writes no section file; its empty CSVs remain."""
    rows = any(name in tables and not tables[name].empty for name in section.tables)
    return rows or any(figures.get(k) for k in section.figures)


def _place(
    section: Placed,
    figures: Mapping[str, Sequence[Path]],
    figure_table: Mapping[str, str],
    present: set[str],
) -> tuple[list[Path], dict[str, list[Path]]]:
    """The section's figures at its top (their table is not among ``present``) and those below each
    present table, in the section's figure order."""
    top: list[Path] = []
    beside: dict[str, list[Path]] = {}
    for key in section.figures:
        table = figure_table.get(key)
        paths = list(figures.get(key, ()))
        if table in present:
            beside.setdefault(table, []).extend(paths)
        else:
            top.extend(paths)
    return top, beside


def _markdown_image(path: Path) -> str:
    return f"![{path.stem}]({quote(path.name)})\n"


def _integral_counts(frame: pd.DataFrame, display: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Counts made float only by NaN cells are written as "12", not "12.0" (same values read back)."""
    converted = {}
    for name in frame.columns:
        column = frame[name]
        if _kind(str(name), column, display) == "count" and column.dtype.kind == "f":
            values = column.dropna()
            if np.isfinite(values).all() and (values == values.round()).all():
                converted[name] = column.astype("Int64")
    return frame.assign(**converted) if converted else frame


# --- display formatting --------------------------------------------------------------------------


def _kind(name: str, column: pd.Series, display: Mapping[str, str] | None = None) -> str:
    """How a column is displayed: 'p', 'percent', 'count', 'float' or 'text': as its table declares
    (``display``), else by the rule on its name below."""
    if is_bool_dtype(column) or not is_numeric_dtype(column):
        return "text"
    if display and name in display:
        return display[name]
    if _P_VALUE.search(name):
        return "p"
    if _COUNT.search(name) or is_integer_dtype(column):  # before percent: retention_undefined_draws
        return "count"
    if _PERCENT.search(name):
        return "percent"
    return "float"


def _is_missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float | np.floating) and np.isnan(value))


def _format(kind: str, value: object) -> str:
    if _is_missing(value):
        return NA
    if kind == "text":
        return str(value)
    number = float(value)
    if not np.isfinite(number):
        return str(number)
    if kind == "percent":
        return f"{100 * number:.1f}"
    if kind == "p":
        return f"{number:.3g}" if number == 0 or number >= 1e-3 else f"{number:.2e}"
    if kind == "count" and number.is_integer():
        return str(int(number))
    return _format_float(number)


def _format_float(number: float) -> str:
    """Three decimals in the usual range, 3 significant digits (scientific) far outside it."""
    if number == 0 or 1e-3 <= abs(number) < 1e5:
        return f"{number:.3f}"
    return f"{number:.3g}"


def _display(
    frame: pd.DataFrame, display: Mapping[str, str] | None = None
) -> tuple[list[str], list[bool], list[list[str]]]:
    """Headers (percent columns marked '(%)'), right-alignment flags and formatted cells."""
    kinds = [_kind(str(name), frame[name], display) for name in frame.columns]
    headers = [f"{name} (%)" if kind == "percent" else str(name) for name, kind in zip(frame.columns, kinds)]
    rows = [
        [_format(kind, value) for kind, value in zip(kinds, record)]
        for record in frame.itertuples(index=False, name=None)
    ]
    return headers, [kind != "text" for kind in kinds], rows


def _md_row(cells: Sequence[str]) -> str:
    escaped = (c.replace("|", "\\|").replace("\r", " ").replace("\n", " ") for c in cells)
    return "| " + " | ".join(escaped) + " |"


# --- the page's parts, rendered by templates/report.html.j2 --------------------------------------


@cache
def _environment() -> Any:
    from jinja2 import Environment, PackageLoader, StrictUndefined
    from markdown_it import MarkdownIt
    from markupsafe import Markup

    markdown = MarkdownIt("commonmark", {"html": False}).enable("table")  # raw HTML in prose is text
    env = Environment(
        loader=PackageLoader("kvx.aggregate.publish", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters["markdown"] = lambda text: Markup(markdown.render(text))
    return env


def _asset(name: str) -> Any:
    """A template file inlined as is (the style sheet, the script): trusted, not escaped."""
    from markupsafe import Markup

    return Markup((resources.files("kvx.aggregate.publish") / "templates" / name).read_text(encoding="utf-8"))


def _validation_view(problems: pd.DataFrame, out: Path) -> dict[str, Any] | None:
    if problems.empty:
        return None
    counts = problems["severity"].astype(str).value_counts()
    return {
        "n": len(problems),
        "counts": list(counts.items()),
        "table": _table_view("problems", problems, out),
    }


def _section_view(
    section: Placed,
    tables: Mapping[str, pd.DataFrame],
    figures: Mapping[str, Sequence[Path]],
    out: Path,
    report: Report,
) -> dict[str, Any]:
    present = {name: tables[name] for name in section.tables if name in tables and not tables[name].empty}
    top, beside = _place(section, figures, report.figure_table, set(present))
    view: dict[str, Any] = {
        "anchor": section.anchor,
        "heading": section.heading,
        "explanation": prose(section),
    }
    if not present and not any(figures.get(key) for key in section.figures):
        return {
            **view,
            "empty": section.empty[:1].upper() + section.empty[1:] + ".",
            "figures": [],
            "tables": [],
        }
    views = []
    for name in section.tables:
        if name in present:
            shown = report.shown.get(name)
            frame = present[name] if shown is None else shown(present[name])
            images = [_image(path) for path in beside.get(name, ())]
            views.append(_table_view(name, frame, out, report.display.get(name), images))
        else:
            views.append(_table_view(name, None, out))
    return {**view, "empty": None, "figures": [_image(path) for path in top], "tables": views}


def _png_size(data: bytes) -> tuple[int, int] | None:
    """Pixel (width, height) from a PNG's IHDR chunk (bytes 16..24, big-endian); None if not a PNG."""
    if len(data) < 24 or data[:8] != PNG_MAGIC or data[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", data[16:24])


def _image(path: Path) -> dict[str, Any]:
    """An inline image (the template makes it lazy and async so long reports open fast, sized from its
    PNG header so the layout does not jump)."""
    raw = path.read_bytes()
    return {
        "mime": mimetypes.guess_type(path.name)[0] or "image/png",
        "data": base64.b64encode(raw).decode("ascii"),
        "size": _png_size(raw),
        "alt": path.stem,
        "caption": path.name,
    }


def _table_view(
    name: str,
    frame: pd.DataFrame | None,
    out: Path,
    display: Mapping[str, str] | None = None,
    figures: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """A table in the Markdown formatting, capped at MAX_HTML_ROWS, with links to its files; ``None``
    (a table with no rows in its section) shows "No rows." without links."""
    view: dict[str, Any] = {"name": name, "links": [], "headers": None, "figures": list(figures)}
    if frame is None:
        return view
    view["links"] = [
        (f"{quote(name)}.{ext}", f"{name}.{ext}") for ext in ("csv", "md") if (out / f"{name}.{ext}").exists()
    ]
    if frame.columns.empty:
        return view
    headers, numeric, rows = _display(frame.head(MAX_HTML_ROWS), display)
    return {**view, "headers": headers, "numeric": numeric, "rows": rows, "n_rows": len(frame)}
