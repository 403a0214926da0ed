"""The aggregate's catalogue: tables, intermediates, sections and figures declared once, resolved by name."""

from __future__ import annotations

import types
from pathlib import Path

import pandas as pd
import pytest

from kvx.aggregate.__main__ import main
from kvx.aggregate.catalogue import (
    INPUTS,
    Section,
    figure,
    from_modules,
    intermediate,
    load,
    table,
    tables,
)
from kvx.aggregate.run import build_tables, listing, select


def _module(name: str, **members: object) -> types.ModuleType:
    module = types.ModuleType(name)
    for key, value in members.items():
        if callable(value) and hasattr(value, "__module__"):
            value.__module__ = name  # declared in this module
        setattr(module, key, value)
    return module


def _family(calls: list[str]) -> types.ModuleType:
    """A family as a plugin writes one: a section, an intermediate, two tables and a group of two."""

    @intermediate
    def doubled(rows: pd.DataFrame) -> pd.DataFrame:
        calls.append("doubled")
        return rows.assign(x=rows["x"] * 2)

    @table("total", "mine")
    def total(doubled: pd.DataFrame) -> pd.DataFrame:
        calls.append("total")
        return pd.DataFrame({"total": [doubled["x"].sum()]})

    @table("share", "mine")
    def share(doubled: pd.DataFrame, total: pd.DataFrame) -> pd.DataFrame:
        calls.append("share")
        return doubled.assign(share=doubled["x"] / total["total"].iloc[0])

    @tables("first", "absent", section="mine")
    def group(rows: pd.DataFrame) -> dict[str, pd.DataFrame]:
        calls.append("group")
        return {"first": rows.head(1)}

    @table("never", "mine")
    def never(rows: pd.DataFrame) -> pd.DataFrame | None:
        return None

    section = Section("mine", "Mine", 5, "nothing of mine")
    return _module(
        "fake_family",
        doubled=doubled,
        total=total,
        share=share,
        group=group,
        never=never,
        SECTION=section,
    )


def _given(rows: pd.DataFrame) -> dict[str, object]:
    return dict.fromkeys(INPUTS) | {"rows": rows, "problems": []}


def test_tables_are_built_in_dependency_order_each_need_once_absent_when_none() -> None:
    calls: list[str] = []
    catalogue = from_modules({"fake": _family(calls)})
    assert catalogue.table_names() == ["total", "share", "first", "absent", "never"]
    rows = pd.DataFrame({"x": [1, 3]})
    built = build_tables(catalogue, catalogue.table_names(), _given(rows), workers=1)
    assert list(built) == ["total", "share", "first"]  # "absent" and "never" gave nothing: not written
    assert built["total"]["total"].tolist() == [8]  # (1 + 3) * 2
    assert built["share"]["share"].tolist() == [0.25, 0.75]
    assert calls == ["doubled", "total", "share", "group"]  # the intermediate once, for both tables
    told: list[str] = []
    build_tables(catalogue, ["share"], _given(rows), workers=1, on_table=lambda name, _: told.append(name))
    assert told == ["share"]  # its need "total" is built, not written


@pytest.mark.parametrize("workers", [1, 2])
def test_early_tables_come_first_and_background_ones_last_in_a_fork(workers: int) -> None:
    """A background table starts (in a forked process with two workers) before the others are built
    and is collected after them, so its work overlaps theirs; an early one is built first."""

    @table("slow", "mine", background=True)
    def slow(rows: pd.DataFrame) -> pd.DataFrame:
        return rows.assign(slow=1)

    @table("first", "mine", early=True)
    def first(total: pd.DataFrame) -> pd.DataFrame:
        return total

    module = _family([])
    for fn in (slow, first):
        setattr(module, fn.__name__, fn)
        fn.__module__ = module.__name__
    module.group = None  # its "first" is declared here instead
    catalogue = from_modules({"fake": module})
    told: list[str] = []
    built = build_tables(
        catalogue,
        catalogue.table_names(),
        _given(pd.DataFrame({"x": [1]})),
        workers,
        lambda n, _: told.append(n),
    )
    assert told == ["first", "total", "share", "slow"]  # never's None: not told
    assert built["slow"]["slow"].tolist() == [1]


def test_without_rows_only_tables_marked_on_empty_are_built() -> None:
    @table("always", "mine", on_empty=True)
    def always(rows: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame({"n": [len(rows)]})

    module = _family([])
    module.always = always
    always.__module__ = module.__name__
    catalogue = from_modules({"fake": module})
    built = build_tables(catalogue, catalogue.table_names(), _given(pd.DataFrame()), 1, analysed=False)
    assert list(built) == ["always"]


def test_a_name_declared_twice_is_refused_naming_both_families() -> None:
    with pytest.raises(ValueError, match=r"'doubled' is declared twice \(one and two\)"):
        from_modules({"one": _family([]), "two": _family([])})


def test_a_section_declared_twice_is_refused() -> None:
    again = _module("again", S=Section("mine", "Mine again", 6, ""))
    with pytest.raises(ValueError, match="section 'mine' is declared twice"):
        from_modules({"fake": _family([]), "again": again})


def test_an_optional_section_named_like_a_table_is_refused() -> None:
    """Its section file would overwrite the table's Markdown (``{name}.md``)."""
    module = _family([])
    module.TOTALS = Section("total", "Totals", 6, "", optional=True)
    with pytest.raises(ValueError, match="optional section 'total' has a table's name"):
        from_modules({"fake": module})


def test_an_input_cannot_be_declared_again() -> None:
    @intermediate
    def rows() -> pd.DataFrame:
        return pd.DataFrame()

    with pytest.raises(ValueError, match="'rows' is declared twice"):
        from_modules({"bad": _module("bad", rows=rows)})


def test_an_undeclared_need_section_or_figure_table_is_refused() -> None:
    @table("lonely", "mine")
    def lonely(nowhere: pd.DataFrame) -> pd.DataFrame:
        return nowhere

    with pytest.raises(ValueError, match=r"'lonely' \(bad\) needs nowhere, which nothing declares"):
        from_modules({"bad": _module("bad", lonely=lonely, S=Section("mine", "Mine", 1, ""))})

    @table("homeless", "no_such_section")
    def homeless(rows: pd.DataFrame) -> pd.DataFrame:
        return rows

    with pytest.raises(ValueError, match="in section 'no_such_section', which nothing declares"):
        from_modules({"bad": _module("bad", homeless=homeless)})

    @figure("plot", "no_such_table")
    def plot(frame: pd.DataFrame, out: Path) -> list[Path]:
        return []

    with pytest.raises(ValueError, match="figure 'plot' .* draws 'no_such_table', not a table"):
        from_modules({"fake": _family([])}, {"fig": _module("fig", plot=plot)})


def test_select_by_table_section_or_family_and_skip() -> None:
    catalogue = from_modules({"fake": _family([])})
    assert select(catalogue) == catalogue.table_names()
    assert select(catalogue, ["share"]) == ["share"]
    assert select(catalogue, ["mine"], ["first"]) == ["total", "share", "absent", "never"]
    assert select(catalogue, ["fake"], ["mine"]) == []
    with pytest.raises(
        ValueError, match=r"--only 'shar' is not a table, section or family; did you mean 'share'\?"
    ):
        select(catalogue, ["shar"])
    with pytest.raises(ValueError, match="--skip 'zzz' is not a table, section or family; --list lists them"):
        select(catalogue, [], ["zzz"])


def test_the_built_in_catalogue_declares_every_table_once_in_a_declared_section() -> None:
    catalogue = load(figures=True)
    names = catalogue.table_names()
    assert len(names) == len(set(names)) >= 60
    assert {"matrix", "kvd_accounting", "tpbench_p1", "audit_pairs", "contrast_by_ratio"} <= set(names)
    anchors = [s.anchor for s in catalogue.sections]
    assert len(anchors) == len(set(anchors))
    for producer in catalogue.tables():
        assert producer.section in anchors, producer.names
    drawn = {f.table for f in catalogue.figures}
    assert {"matrix", "matched", "kvd_tiers", "tpbench_rank_change", "kvd_slot_ecov_cells"} <= drawn
    assert "heatmaps" in listing(catalogue) and listing(catalogue).count("\n") == len(names)


def test_cli_lists_the_catalogue_and_refuses_an_unknown_name_before_reading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["matrix", "matrix", "[paired]", "figures:", "heatmaps"]
    missing = tmp_path / "no-such-folder"
    assert main(["--records", str(missing), "--only", "matrx", "--no-log"]) == 2
    err = capsys.readouterr().err
    assert "--only 'matrx' is not a table, section or family; did you mean 'matrix'?" in err
    assert not missing.exists()
