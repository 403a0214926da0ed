"""The README and the pages under docs/: every relative link reaches a file (and heading) that exists,
the site's nav lists every page, the README stays an overview, no page points at the team's own paths,
and where a page says the aggregate's tables are is where it writes them.

Fast and without MkDocs (CI also runs `mkdocs build --strict`, which checks the rendered site)."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import yaml

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
FILES = [ROOT / "README.md", *PAGES]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
#: paths only this team's machines have: user docs say where the public data lives instead
PRIVATE = ("../shared", "shared/seeds", "shared/data", "/work/")


def prose(text: str) -> str:
    """The text outside fenced code blocks and inline code, where links are links."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    """A heading's anchor as MkDocs (Python-Markdown's toc) makes it; GitHub agrees on plain headings."""
    text = re.sub(r"[`*]", "", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {slug(m) for m in re.findall(r"^#{1,6} (.+?)\s*$", text, flags=re.M)}


def links(text: str) -> list[str]:
    return LINK.findall(prose(text))


def broken_links(page: Path) -> list[str]:
    """Relative links of a page whose file, or whose heading in a Markdown file, does not exist."""
    broken = []
    for target in links(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading with that anchor")
    return broken


def test_every_relative_link_reaches_a_file_and_heading_that_exist():
    broken = {str(page.relative_to(ROOT)): broken_links(page) for page in FILES}
    assert {page: targets for page, targets in broken.items() if targets} == {}


def test_the_check_finds_a_missing_page_and_a_missing_heading(tmp_path: Path):
    page = tmp_path / "a.md"
    page.write_text(
        "# A\n\n## Two words\n\n[ok](#two-words) [x](b.md) [y](a.md#nope) [w](https://x.org/c.md)\n"
    )
    assert broken_links(page) == ["b.md: no such file", "a.md#nope: no heading with that anchor"]


def test_anchors_follow_mkdocs_and_links_inside_code_are_not_links():
    assert slug("Validation first (KVDiagnosis Table 10)") == "validation-first-kvdiagnosis-table-10"
    assert slug("Scale-out: launchers, grouped jobs, a `tracking` server") == (
        "scale-out-launchers-grouped-jobs-a-tracking-server"
    )
    assert links("`[a](missing.md)`\n\n```\n[b](missing.md)\n```\n[c](here.md)\n") == ["here.md"]


def test_no_page_points_at_the_teams_private_paths():
    found = {
        str(page.relative_to(ROOT)): [p for p in PRIVATE if p in page.read_text(encoding="utf-8")]
        for page in FILES
    }
    assert {page: paths for page, paths in found.items() if paths} == {}


def test_the_nav_lists_every_page_and_only_pages_that_exist():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    def entries(nav: list) -> list[str]:
        out = []
        for item in nav:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            out += entries(value) if isinstance(value, list) else [value]
        return out

    listed = entries(config["nav"])
    assert sorted(listed) == sorted(str(p.relative_to(DOCS)) for p in PAGES)
    assert config["validation"]["links"]["anchors"] == "warn"  # --strict turns it into an error


def test_the_readme_is_an_overview_with_the_same_quickstart_and_map_as_the_site():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    quickstart = re.search(r"```bash\n(.*?)```", readme, flags=re.S).group(1)
    assert quickstart in index
    run = "bash scripts/setup.sh && .venv/bin/python -m kvx -m press=snapkv,tova ratio=0.25,0.5"
    assert f"{run} && .venv/bin/python -m kvx.aggregate\n" in quickstart
    assert "bash scripts/setup.sh && .venv/bin/python -m pytest -n auto\n" in quickstart  # in parallel
    readme_map = re.findall(r"^- \[[^\]]+\]\(docs/([^)]+)\)", readme, flags=re.M)
    index_map = re.findall(r"^- \[[^\]]+\]\(([^)]+)\)", index, flags=re.M)
    assert readme_map == index_map
    assert sorted(readme_map) == sorted(str(p.relative_to(DOCS)) for p in PAGES if p.name != "index.md")


def test_where_the_docs_say_aggregate_tables_are_is_where_the_aggregate_writes_them(tmp_path: Path):
    import pandas as pd

    from kvx.aggregate.publish.report import write_tables

    written = write_tables({"matrix": pd.DataFrame({"a": [1]})}, tmp_path)["matrix"]
    claimed = {
        (page.name, form)
        for page in FILES
        for form in re.findall(r"`([\w./]*<name>\.(?:csv|md))`", page.read_text(encoding="utf-8"))
    }
    assert claimed  # docs/kvdiagnosis.md names the tables' file
    for page, form in claimed:
        assert tmp_path / form.replace("<name>", "matrix") in written, f"{page}: `{form}`"
