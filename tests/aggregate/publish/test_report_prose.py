"""The report from templates: ``report.html`` is the Jinja2 template under kvx/aggregate/publish/templates/
(no HTML in Python under kvx/aggregate), each section's explanation is one Markdown file in
kvx/aggregate/prose/ that the report, the section files and docs/report-sections.md share, sections (and
their prose package) are a parameter, and each figure stands below the table it draws."""

from __future__ import annotations

import re
import struct
from importlib import resources
from pathlib import Path

import pandas as pd
import pytest
import yaml
from markdown_it import MarkdownIt

from kvx.aggregate.catalogue import PROSE_PACKAGE, Section, load
from kvx.aggregate.publish import report, sections_page
from kvx.aggregate.ragscale import outcomes

ROOT = Path(__file__).parents[3]
ALL = report.placed(load(figures=True, distributions=["kvx"]))  # kvx's own, plugins aside
#: an HTML element's opening or closing tag (not a placeholder such as ``<name>`` or ``<split>``)
TAG = re.compile(
    r"</?(a|b|br|body|button|caption|code|div|em|figcaption|figure|h[1-6]|head|hr|html|i|img|li|link|"
    r"meta|nav|ol|p|pre|script|section|span|strong|style|table|tbody|td|th|thead|title|tr|ul)(?=[\s>/])",
    re.IGNORECASE,
)


def _prose_files() -> dict[str, str]:
    folder = resources.files(PROSE_PACKAGE)
    return {f.name[:-3]: f.read_text(encoding="utf-8") for f in folder.iterdir() if f.name.endswith(".md")}


def test_no_html_tags_in_python_under_kvx_aggregate():
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in sorted((ROOT / "kvx" / "aggregate").rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if TAG.search(line)
    ]
    assert found == []
    assert TAG.search('f"<td class=num>{x}</td>"') and not TAG.search("``m.<name>``, <split>.jsonl, <prefix>")


def test_every_section_has_its_prose_and_every_prose_file_a_section():
    files = _prose_files()
    assert sorted(files) == sorted(s.anchor for s in ALL)
    for section in ALL:
        assert report.prose(section) == section.explanation == files[section.anchor]
        assert section.explanation.strip() and section.explanation.endswith("\n")


@pytest.mark.parametrize("anchor", sorted(_prose_files()))
def test_prose_renders_as_paragraphs_lists_and_code_only(anchor):
    """A stray ``*`` or ``_`` (``M*12``, ``_seed_mean``) would render as emphasis: identifiers are code."""
    html = MarkdownIt("commonmark", {"html": False}).enable("table").render(_prose_files()[anchor])
    assert set(re.findall(r"<([a-z0-9]+)\b", html)) <= {"p", "ul", "li", "code"}


def test_the_prose_states_the_constants_current_values():
    audit = " ".join(report.prose(Section("audit", "", 0, "")).split())
    assert f"the report shows the first {outcomes.CHANGED_SHOWN} of each comparison" in audit
    assert f"(|`raw_upgrade`| < {outcomes.MINIMUM_GAP * 100:g} pp)" in audit
    assert f"(retention below `--retention-alert`, default {outcomes.RETENTION_ALERT})" in audit
    assert f"retention N/A below {outcomes.MINIMUM_GAP * 100:g} pp" in audit


def test_the_docs_page_is_the_catalogue_and_includes_every_section_prose_in_report_order():
    """docs/report-sections.md is what the catalogue writes (its sections, tables and figures) and includes
    each prose file (pymdownx.snippets) under its section's heading: the docs hold no copy of the prose."""
    page = (ROOT / "docs" / "report-sections.md").read_text(encoding="utf-8")
    assert page == sections_page.page(load(figures=True, distributions=["kvx"])), (
        "rewrite it: python -m kvx.aggregate.publish.sections_page docs/report-sections.md"
    )
    included = re.findall(r'^## (.+)\n\n.*\n\n--8<-- "([\w-]+)\.md"$', page, flags=re.M)
    assert included == [(s.heading, s.anchor) for s in ALL]
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8").replace("!!python", "#"))
    (snippets,) = [e["pymdownx.snippets"] for e in config["markdown_extensions"] if "pymdownx.snippets" in e]
    assert snippets == {"base_path": ["kvx/aggregate/prose"], "check_paths": True}


def _png(path: Path, width: int = 4, height: int = 3) -> Path:
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + struct.pack(">II", width, height) + b"\0" * 9
    )
    return path


def test_a_figure_stands_below_its_table_and_one_whose_table_has_no_rows_at_the_top(tmp_path):
    tables = {"costs": pd.DataFrame({"a": [1]}), "frontier": pd.DataFrame({"b": []})}
    figures = {
        "frontier_plot": [_png(tmp_path / "frontier_x.png")],
        "heatmaps": [_png(tmp_path / "heat.png")],
    }
    page = report.write_html(tables, figures, tmp_path, "t", {}).read_text(encoding="utf-8")
    matrix = page[page.index('<h2 id="matrix">') : page.index('<h2 id="costs">')]
    assert matrix.index('alt="heat"') < matrix.index("<h3>matrix</h3>")  # no matrix table: on top
    costs = page[page.index('<h2 id="costs">') : page.index('<h2 id="failures">')]
    assert costs.index('alt="frontier_x"') < costs.index("<h3>costs</h3>")  # frontier has no rows

    tables["frontier"] = pd.DataFrame({"b": [0.5]})
    page = report.write_html(tables, figures, tmp_path, "t", {}).read_text(encoding="utf-8")
    costs = page[page.index('<h2 id="costs">') : page.index('<h2 id="failures">')]
    below = costs.index("<h3>frontier</h3>") < costs.index('alt="frontier_x"')
    assert below and costs.index("<h3>costs</h3>") < costs.index("<h3>frontier</h3>")
    assert re.search(r'<h3>frontier</h3>.*?</table></div>\n<figure><img [^>]*alt="frontier_x"', costs, re.S)


def test_sections_are_a_parameter_with_their_own_prose(tmp_path, monkeypatch):
    """A section from elsewhere (as a plugin or the catalogue would pass it) shows with its package's prose,
    rendered from Markdown in the page (raw HTML shown as text) and copied into its section file."""
    package = tmp_path / "lib" / "myprose"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "mine.md").write_text("Read **this** first: `a_b` <script>x</script>\n\n- one\n- two\n")
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    mine = report.Placed("mine", "My section", 0, "nothing", True, "myprose", ("mine",), ("mine_plot",))
    placed = report.Report((mine,), {"mine_plot": "mine"}, {}, {})
    unplaced = report.Report((mine,), {}, {}, {})
    tables = {"mine": pd.DataFrame({"n_x": [3]})}
    figures = {"mine_plot": [_png(tmp_path / "mine_plot.png")]}
    out = tmp_path / "out"
    report.write_tables(tables, out)

    page = report.write_html(tables, figures, out, "t", {}, placed)
    page = page.read_text(encoding="utf-8")
    assert '<li><a href="#mine">My section</a></li>' in page and 'id="matrix"' not in page
    assert "<p>Read <strong>this</strong> first: <code>a_b</code> &lt;script&gt;x&lt;/script&gt;</p>" in page
    assert "<ul>\n<li>one</li>" in page and "Other tables" not in page
    assert re.search(r"<h3>mine</h3>.*</table></div>\n<figure><img [^>]*alt=\"mine_plot\"", page, re.S)

    (written,) = report.write_section_markdown(tables, figures, out, unplaced)
    text = written.read_text(encoding="utf-8")
    assert written.name == "mine.md"
    assert text.startswith(
        "# My section\n\nRead **this** first: `a_b` <script>x</script>\n\n- one\n- two\n\n"
    )
    assert text.index("![mine_plot](mine_plot.png)") < text.index("## mine")  # its table unknown: on top
    (written,) = report.write_section_markdown(tables, figures, out, placed)
    text = written.read_text(encoding="utf-8")
    assert text.endswith("## mine\n\n| n_x |\n| ---: |\n| 3 |\n\n![mine_plot](mine_plot.png)\n")
    assert report.prose(Section("absent", "", 0, "", prose_package="myprose")) == ""


def test_an_optional_section_whose_tables_have_no_rows_stays_out(tmp_path):
    """A one-reader sweep runs the audit's controls and finds nothing: their (empty) tables are written
    as CSV, but the page has no "Audit control" section saying "No rows" five times, and no section file."""
    empty = {name: pd.DataFrame(columns=["task", "metric"]) for name in ("audit_nulls", "audit_screen")}
    page = report.write_html(empty, {}, tmp_path, "t", {}).read_text(encoding="utf-8")
    assert 'id="control_nulls"' not in page and 'id="control_screen"' not in page
    assert report.write_section_markdown(empty, {}, tmp_path) == []
    shown = report.write_html({"audit_nulls": pd.DataFrame({"task": ["t"]})}, {}, tmp_path, "t", {})
    assert 'id="control_nulls"' in shown.read_text(encoding="utf-8")
