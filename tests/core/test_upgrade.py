"""Records an earlier kvx wrote stay readable: schema-1 records, frozen as kvx 0.1 itself wrote them
(tests/fixtures/schema1), aggregate to the matrices kvx 0.1 computed and to those of their schema-2 form."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kvx.aggregate.options import Options
from kvx.aggregate.read.sources import DirectorySource
from kvx.aggregate.run import analyse
from kvx.core.records import SCHEMA_VERSION, Answer, dumps, validate
from kvx.core.upgrade import UNKNOWN_IN_1, upgrade
from kvx.testing.synthetic import Grid, as_schema1, cells, controls

FIXTURES = Path(__file__).parents[1] / "fixtures" / "schema1"
#: the grid tests/fixtures/schema1/synthetic was generated with by kvx 0.1's generator (its README)
GRID = Grid(n_sources=4, compressors=("snapkv", "tova"), ratios=(0.25,), intervention=False)
FAST = Options(n_splits=200, n_boot=200, seed=1, progress=False, workers=1)
#: the columns kvx 0.1's matrix had (its own CSV's header), compared value by value
MATRIX_KEYS = ["task", "reader", "compressor", "setting"]
#: how far a float recomputed here may be from the one the fixture stores: the generator's diagnostics go
#: through libm/BLAS (exp, log, dot products), whose builds and CPUs differ in the last bit or two
#: (0.9063157723320441 here, ...442 in the fixture); 1e-12 relative is thousands of ulps, yet a real change
#: in a value is far larger
REL_TOL, ABS_TOL = 1e-12, 1e-15


def records(name: str) -> list[dict]:
    folder = FIXTURES / name / "records"
    return [
        json.loads(line)
        for path in sorted(folder.glob("*.jsonl"))
        if not path.name.endswith(".controls.jsonl")
        for line in path.read_text(encoding="utf-8").splitlines()
    ]


def differences(mine: Any, stored: Any, path: str = "") -> list[str]:
    """Where ``mine`` is not ``stored``: floats within REL_TOL/ABS_TOL, everything else (keys, lengths,
    types, strings, ints, bools, None) exactly; empty when they are the same record(s)."""
    if type(mine) is not type(stored):
        return [f"{path or '(top)'}: {mine!r} vs stored {stored!r}"]
    if isinstance(mine, dict):
        if mine.keys() != stored.keys():
            return [f"{path or '(top)'}: keys {sorted(mine)} vs stored {sorted(stored)}"]
        return [d for k in mine for d in differences(mine[k], stored[k], f"{path}.{k}" if path else k)]
    if isinstance(mine, list):
        if len(mine) != len(stored):
            return [f"{path or '(top)'}: {len(mine)} items vs stored {len(stored)}"]
        pairs = enumerate(zip(mine, stored, strict=True))
        return [d for i, (a, b) in pairs for d in differences(a, b, f"{path}[{i}]")]
    if isinstance(mine, float):
        same = math.isclose(mine, stored, rel_tol=REL_TOL, abs_tol=ABS_TOL) or (
            math.isnan(mine) and math.isnan(stored)
        )
    else:
        same = mine == stored
    return [] if same else [f"{path}: {mine!r} vs stored {stored!r}"]


def aggregate(root: Path):
    return analyse(DirectorySource([root]), FAST)


def by_cell(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in one order whatever order they were read in (tables without cell columns as they are)."""
    keys = [k for k in MATRIX_KEYS if k in frame]
    frame = frame.fillna({"setting": ""}) if "setting" in frame else frame
    return frame.sort_values(keys).reset_index(drop=True) if keys else frame


@pytest.mark.parametrize("name", ["engine", "synthetic"])
def test_schema1_study_aggregates_to_the_matrix_kvx_01_computed(name):
    """Both fixtures are read with 0 errors, every record kept, and the matrix is kvx 0.1's own to the
    last digit; the upgrade is reported once with the fields it leaves unknown."""
    result = aggregate(FIXTURES / name / "records")
    n = len(records(name))
    assert result.n_records == n and result.n_rows == n
    assert [p for p in result.problems if p.severity == "error"] == []
    (note,) = result.problems
    assert note.check == "schema_version" and note.severity == "warning"
    assert note.message.startswith(f"{n} records upgraded from schema 1 to {SCHEMA_VERSION}")
    assert all(field in note.message for field in UNKNOWN_IN_1)
    old = pd.read_csv(FIXTURES / name / "kvx-0.1-matrix.csv", dtype={"setting": str})
    new = result.tables["matrix"]
    assert set(new["level"]) == {"task"}
    pd.testing.assert_frame_equal(by_cell(new[list(old.columns)]), by_cell(old), check_dtype=False)


def test_schema1_synthetic_study_matches_its_schema2_form(tmp_path):
    """The same grid written by today's generator (schema 2) gives the same tables, row for row, except
    what schema 1 never recorded: the costs are unknown in it, not zero."""
    v2 = tmp_path / "v2"
    v2.mkdir()
    written = [r for _, cell in cells(GRID) for r in cell]
    (v2 / "records.jsonl").write_text(dumps(written))
    (v2 / f"{written[0]['split']}.controls.jsonl").write_text(dumps(controls(written)))
    old, new = aggregate(FIXTURES / "synthetic" / "records"), aggregate(v2)
    assert new.problems == []
    for name in ("matrix", "failures", "categories", "separation", "matched", "contrast"):
        pd.testing.assert_frame_equal(by_cell(old.tables[name]), by_cell(new.tables[name]), obj=name)
    old_cost, new_cost = old.tables["costs"], new.tables["costs"]
    assert (old_cost["n_bytes"] == 0).all() and old_cost["kv_mib_median"].isna().all()
    assert (new_cost["n_bytes"] > 0).all() and new_cost["kv_mib_median"].notna().all()


def test_schema1_downgrade_is_what_kvx_01_wrote():
    """The benchmark's schema-1 study is today's records through ``as_schema1``: on the fixture's grid it
    gives exactly the records kvx 0.1's generator wrote, and an unsupported record has the fields kvx
    0.1's engine wrote for one (no FullCache answer)."""
    written = [as_schema1(r) for _, cell in cells(GRID) for r in cell]
    assert differences(written, records("synthetic")) == []
    engine = next(r for r in records("engine") if r["status"] == "unsupported")
    think = Grid(n_sources=1, compressors=("think",), ratios=(0.75,), unsupported=(("think", 0.75),))
    ((_, (unsupported,)),) = cells(think)
    mine = as_schema1(unsupported)
    assert set(mine) == set(engine) - {"contrast"} and mine["full"] is None is engine["full"]
    assert set(mine["setting"]) == set(engine["setting"])


def test_upgrade_moves_what_the_record_states_and_imputes_nothing():
    record = next(r for r in records("engine") if r["key"].endswith("/snapkv/ratio=0.5/seed=0"))
    before = copy.deepcopy(record)
    assert upgrade(record) == UNKNOWN_IN_1
    validate(record)  # the current schema, not schema 1's
    assert record["schema_version"] == SCHEMA_VERSION and record["key"] == before["key"]
    assert record["setting"] == {"kind": "ratio", "value": 0.5, **before["setting"]}
    assert record["cell"] == {
        "id": before["config_hash"],  # schema 1's cell identity
        "fields": {
            "task": "ruler_niah_single",
            "reader": "tiny",
            "press": "snapkv",
            "setting.kind": "ratio",
            "setting.value": 0.5,
            "seed": 0,
            "query_aware": False,
        },
    }
    for name in ("task_family", "reader_family", "prompt_format", "transform"):
        assert name not in record
    assert "cost" not in record["full"] and "cost" not in record["compressed"]
    assert {k: v for k, v in record.items() if k not in ("schema_version", "setting", "cell")} == {
        k: v for k, v in before.items() if k not in ("schema_version", "setting")
    }
    assert upgrade(record) == ()  # a current record is left as it is


def test_asked_ratio_comes_from_the_key_not_what_the_method_ran_with():
    """press=none ran with ratio 0 whatever the cell asked: the setting is the asked ratio in its key."""
    record = records("engine")[0] | {"key": "t/s/r@x/none/ratio=0.5/seed=0", "compressor": "none"}
    record["setting"] = {"ratio": 0.0, "retained_share": 1.0, "method_parameter": {}}
    upgrade(record)
    setting = record["setting"]
    assert (setting["kind"], setting["value"], setting["ratio"]) == ("ratio", 0.5, 0.0)
    bare = records("engine")[0] | {"key": "hand-made"}
    upgrade(bare)
    assert bare["setting"]["value"] == bare["setting"]["ratio"]


def test_versions_this_kvx_cannot_read_are_refused_untouched(tmp_path):
    for version in ("0", "4", None):
        record = records("engine")[0] | {"schema_version": version}
        before = copy.deepcopy(record)
        assert upgrade(record) is None and record == before
    unversioned = records("engine")[0]
    del unversioned["schema_version"]
    assert upgrade(unversioned) is None
    newer = records("engine")[0] | {"schema_version": "4", "key": "newer"}
    (tmp_path / "r.jsonl").write_text(json.dumps(newer) + "\n")
    result = aggregate(tmp_path)
    (problem,) = [p for p in result.problems if p.key == "newer"]
    assert problem.severity == "error" and "reads versions '1', '2', '3'" in problem.message


def test_a_malformed_schema1_record_is_explained_by_the_schema_not_made_whole(tmp_path):
    bad = records("engine")[0]
    del bad["config_hash"]
    (tmp_path / "r.jsonl").write_text(json.dumps(bad) + "\n")
    result = aggregate(tmp_path)
    (problem,) = [p for p in result.problems if p.severity == "error"]
    assert problem.check == "schema" and "config_hash" in problem.message  # what schema 1 required


def test_a_control_stored_by_schema1_kvx_loads_with_its_cost_unknown():
    """Stored FullCache controls kept their shape; kvx 0.1's (no cost) load, and the cost stays None."""
    (ledger,) = (FIXTURES / "engine" / "records").glob("*.controls.jsonl")
    line = ledger.read_text(encoding="utf-8").splitlines()[0]
    entry = json.loads(line)
    answer = Answer.from_dict({k: v for k, v in entry.items() if k not in ("source_id", "prompt_hash")})
    assert answer.cost is None and answer.token_ids == entry["token_ids"]


@pytest.mark.parametrize(
    ("press", "flat", "name", "upgraded"),
    [
        (
            "expected_attention",
            {"press.n_sink": 4, "press.epsilon": 0.0},
            "expected_attention_plain",
            {"press.n_sink": 4, "press.epsilon": 0.0},
        ),
        (
            "adakv",
            {"press.alpha_safeguard": 0.2, "press.window_size": 64, "press.kernel_size": 5},
            "adakv",
            {
                "press.alpha_safeguard": 0.2,
                "press.base": "snapkv",
                "press.base.window_size": 64,
                "press.base.kernel_size": 5,
            },
        ),
        ("chunkkv", {"press.chunk_length": 20}, "chunkkv", {"press.chunk_length": 20, "press.base": "knorm"}),
        ("block", {"press.block_size": 128}, "block", {"press.block_size": 128, "press.base": "knorm"}),
        ("snapkv", {"press.window_size": 64}, "snapkv", {"press.window_size": 64}),
    ],
)
def test_a_schema2_press_reads_as_kvpress_names_it_with_the_base_it_ran_over(press, flat, name, upgraded):
    """Schema 3 names presses as kvpress's registry does: what a schema-2 record called chunkkv ran
    over K-norm, its expected_attention is today's expected_attention_plain; the cell id stays."""
    record = {
        "schema_version": "2",
        "compressor": press,
        "cell": {"id": "abc", "fields": {"press": press, **flat}},
    }
    assert upgrade(record) == ()
    assert record["schema_version"] == SCHEMA_VERSION and record["compressor"] == name
    assert record["cell"] == {"id": "abc", "fields": {"press": name, **upgraded}}


def test_an_imported_schema2_record_keeps_the_press_its_importer_mapped():
    record = {
        "schema_version": "2",
        "compressor": "chunkkv",
        "provenance": {"origin": "external", "source": "tpbench"},
        "cell": {"id": "abc", "fields": {"press": "chunkkv", "origin": "tpbench"}},
    }
    upgrade(record)
    assert record["cell"]["fields"] == {"press": "chunkkv", "origin": "tpbench"}


def test_a_store_continued_after_schema_3_aggregates_its_schema2_and_schema3_records_together(tmp_path):
    """Schema 3 kept schema 2's cell ids: a store whose first cells were written before it and whose
    later ones after reads as one study (an upgrade warning, no mixed-versions error)."""
    written = [r for _, cell in cells(GRID) for r in cell]
    older = [dict(r, schema_version="2") for r in written[: len(written) // 2]]
    lines = [json.dumps(r) for r in older + written[len(written) // 2 :]]
    (tmp_path / "r.jsonl").write_text("\n".join(lines) + "\n")
    result = aggregate(tmp_path)
    versions = [p for p in result.problems if p.check == "schema_version"]
    assert [p.severity for p in versions] == ["warning"], [p.message for p in versions]
    assert f"{len(older)} records upgraded from schema 2 to 3" in versions[0].message
