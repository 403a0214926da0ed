"""docs/reproduce/: each paper's page is generated from its spec, lists every numbered table and figure
of the paper, and backs every status with a command or a test that exists."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).parents[1]
SEEDS = ROOT.parent / "shared" / "seeds"  # the papers' texts, where a developer's checkout has them


def _generator() -> ModuleType:
    path = ROOT / "scripts" / "reproduction_pages.py"
    spec = importlib.util.spec_from_file_location("reproduction_pages", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()
SPECS: dict[str, dict[str, Any]] = GENERATOR.specs()


def test_there_is_a_page_for_each_of_the_four_papers() -> None:
    assert set(SPECS) == {"kvdiagnosis", "tpbench", "ragscale", "kv_exec_bench"}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_page_is_generated_from_its_spec(name: str) -> None:
    page = (ROOT / "docs" / "reproduce" / f"{name}.md").read_text()
    stale = f"{name}.md is stale: run python scripts/reproduction_pages.py"
    assert page == GENERATOR.render(SPECS[name], name), stale


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_numbered_table_and_figure_is_listed_once(name: str) -> None:
    spec = SPECS[name]
    listed = [number for row in spec["rows"] for number in GENERATOR.numbered(row)]
    expected = [("Table", n) for n in range(1, spec["numbered"]["tables"] + 1)]
    expected += [("Figure", n) for n in range(1, spec["numbered"]["figures"] + 1)]
    assert sorted(listed) == sorted(expected)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_status_is_backed(name: str) -> None:
    spec = SPECS[name]
    commands = spec.get("commands", {})
    used = set()
    for row in spec["rows"]:
        label = row["items"]
        assert row["status"] in GENERATOR.STATUSES, label
        named = row.get("command", [])
        named = [named] if isinstance(named, str) else named
        used.update(named)
        if row["status"] in ("release", "runnable"):
            assert row.get("tests"), f"{label}: a {row['status']} row names the tests behind it"
            assert named, f"{label}: a {row['status']} row names the command that makes it"
        else:
            assert row.get("why"), f"{label}: says why there is nothing to run"
        for command in named:
            if command not in commands:  # a literal command on the row: it says what it needs
                assert row.get("needs") is not None, f"{label}: {command!r} says what it needs (needs: [])"
    assert used >= set(commands), f"commands no row uses: {sorted(set(commands) - used)}"


def _named_tests() -> list[str]:
    return sorted({test for spec in SPECS.values() for row in spec["rows"] for test in row.get("tests", [])})


@pytest.mark.parametrize("node", _named_tests())
def test_every_named_test_exists(node: str) -> None:
    path, _, name = node.partition("::")
    source = (ROOT / path).read_text()
    assert re.search(rf"^(?:async )?def {re.escape(name)}\(", source, re.M), f"{node} is not a test"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_counts_are_the_papers(name: str) -> None:
    """Where the papers' texts are beside the checkout, the highest table and figure numbers in the text
    are the spec's (a paper added a table, or the spec miscounted)."""
    spec = SPECS[name]
    texts = [p.read_text(errors="replace") for p in sorted(SEEDS.glob("*.txt"))] if SEEDS.is_dir() else []
    text = next((t for t in texts if spec["match"] in t[:3000]), None)
    if text is None:
        pytest.skip(f"the paper's text is not at {SEEDS}")
    found = {kind: {int(n) for n in re.findall(rf"{kind}[ ~](\d+)", text)} for kind in ("Table", "Figure")}
    if not found["Table"] | found["Figure"]:  # LaTeX numbers its floats itself: count them
        found = {"Table": {*range(1, text.count("\\begin{table") + 1)}}
        found["Figure"] = {*range(1, text.count("\\begin{figure") + 1)}
    numbered = spec["numbered"]
    assert (max(found["Table"]), max(found["Figure"])) == (numbered["tables"], numbered["figures"])
