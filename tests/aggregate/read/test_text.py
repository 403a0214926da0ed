"""Text in the aggregate is compared and grouped exactly: answers and source ids holding NUL, line or
paragraph separators, lone surrogates or a megabyte of text stay distinct values, never merged."""

from __future__ import annotations

import copy
import json
from hashlib import blake2b
from pathlib import Path

import numpy as np
import pandas as pd

from kvx.aggregate.kvdiagnosis.demand import _profile
from kvx.aggregate.options import Options
from kvx.aggregate.read import text
from kvx.aggregate.read.rows import _text_hash
from kvx.aggregate.read.validation import _compact, _shared
from kvx.aggregate.stats.resampling import cluster_interval
from kvx.core.records import dumps
from kvx.testing.crafted import panel, rec, run, write
from kvx.testing.synthetic import controls

#: distinct strings pandas' C-string hash table takes for one another (a NUL ends its view of a string;
#: lone surrogates), and texts it gets right, which must stay right
TRICKY = [
    "~\x00abc",
    "~\x00xyz",
    "~",
    "\x00",
    "",
    "x\ud800",
    "x\udc00",
    "a\u2028b",
    "a\u2029b",
    "a\x85b",
    "long " * 200_000,
    "long " * 200_000 + "\x00",
]


def test_factorize_keeps_every_distinct_text_and_type() -> None:
    values = [*TRICKY, *TRICKY, None, float("nan"), True, 1, 1.0]
    codes, uniques = text.factorize(values)
    assert len(pd.Categorical(np.array(TRICKY, dtype=object)).categories) < len(TRICKY)  # why: pandas
    assert list(uniques) == [*TRICKY, True, 1, 1.0]
    assert [type(u) for u in uniques[-3:]] == [bool, int, float]
    n = len(TRICKY)
    assert codes.tolist() == [*range(n), *range(n), -1, -1, n, n + 1, n + 2]


def test_group_codes_is_an_exact_ngroup() -> None:
    b = ["~\x00abc", "~\x00xyz", "~\x00abc", "x", None]
    frame = pd.DataFrame({"a": ["t", "t", "t", "t", None], "b": b})
    assert text.group_codes(frame, ["a", "b"]).tolist() == [0, 1, 0, 2, 3]
    assert text.exact(frame["b"]).tolist()[:4] == [0, 1, 0, 2] and text.exact(frame["b"]).isna().iloc[4]


def test_batches_keep_distinct_texts_through_compact_and_shared() -> None:
    """What a worker sends (``_compact``) and the frame built from every batch (``_shared``) hold each
    text as it was, value for value, across batches that code them apart."""
    first = pd.DataFrame({"key": ["k0", "k1", "k2"], "full_output": TRICKY[:3], "n": [1.0, 2.0, 3.0]})
    second = pd.DataFrame({"key": [f"k{i}" for i in range(3, 3 + len(TRICKY))], "full_output": TRICKY[::-1]})
    frame = _shared([_compact(first), _compact(second)])
    assert frame["full_output"].tolist() == TRICKY[:3] + TRICKY[::-1]
    assert frame["key"].tolist() == [f"k{i}" for i in range(3 + len(TRICKY))]
    assert frame["n"].iloc[:3].tolist() == [1.0, 2.0, 3.0] and frame["n"].iloc[3:].isna().all()


def _nul_records() -> list[dict]:
    """Two cells of four sources whose FullCache and compressed answers differ only after a NUL."""
    records = []
    for comp in ("snapkv", "tova"):
        for i in range(4):
            r = rec(source=f"s{i}", comp=comp)
            r["full"]["output"] = f"~\x00full{i}"
            r["compressed"]["output"] = f"~\x00{comp}{i}"
            records.append(r)
    return records


def test_answers_with_a_nul_are_all_analysed(tmp_path: Path) -> None:
    """The ``keep_ends`` sweep's case: 8 records whose ledger agrees are 8 rows, with no partner error
    (kvx 0.x: 4 analysed, 4 'differs from the control ledger')."""
    records = _nul_records()
    write(tmp_path, records)
    (tmp_path / f"{records[0]['split']}.controls.jsonl").write_text(dumps(controls(records[:4])))
    result = run(tmp_path)
    assert [p for p in result.problems if p.severity == "error"] == []
    assert result.n_records == 8 and result.n_rows == 8


def test_fullcache_answers_differing_after_a_nul_are_a_partner_problem(tmp_path: Path) -> None:
    """Two cells of one source with FullCache answers that differ only after a NUL disagree."""
    records = _nul_records()
    records[4]["full"]["output"] = "~\x00other"  # s0 in the tova cell
    write(tmp_path, records)
    found = [p for p in run(tmp_path).problems if p.check == "partner"]
    assert [p.message for p in found] == [
        "the FullCache answer differs between cells of the same source; source left out"
    ]
    assert found[0].key.endswith("|s0|r@rev1")


def test_source_ids_differing_after_a_nul_are_distinct_sources(tmp_path: Path) -> None:
    """Ids that differ after a NUL, or in a lone surrogate (which only a JSON escape can carry: kvx's own
    writer refuses to encode one), are four sources of two cells, each cell complete."""
    records = []
    for comp in ("snapkv", "tova"):
        for i, source in enumerate(["q\x00a", "q\x00b", "q\ud800", "q\udc00"]):
            r = rec(source=f"s{i}", comp=comp)
            r["source_id"] = source
            r["key"] = r["key"].replace(f"/s{i}/", f"/{source}/")
            records.append(r)
    (tmp_path / "cell.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))  # \ud800 escaped
    result = run(tmp_path)
    assert [p for p in result.problems if p.severity == "error"] == []
    assert result.n_rows == 8
    matrix = result.tables["matrix"]
    assert set(matrix.loc[matrix["level"] == "task", "n_sources"]) == {4}
    assert set(result.tables["kvd_accounting"]["n_sources"]) == {4}


def test_compressed_outputs_with_lone_surrogates_are_hashed_apart(tmp_path: Path) -> None:
    """An external record's JSON may escape a lone surrogate in an answer: it is read and hashed (the
    output hash encoded it as UTF-8, which raised), and two such answers keep two hashes."""
    records = _nul_records()[:2]
    records[0]["compressed"]["output"], records[1]["compressed"]["output"] = "x\ud800", "x\udc00"
    (tmp_path / "cell.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    rows = run(tmp_path).tables["matrix"]
    assert not rows.empty
    assert _text_hash("x\ud800") != _text_hash("x\udc00")
    assert _text_hash("plain") == float(
        int.from_bytes(blake2b(b"plain", digest_size=8).digest(), "big") >> 12
    )


def test_drop_duplicates_and_n_distinct_keep_texts_apart() -> None:
    """What pandas merges on several columns (``drop_duplicates``) or counts once (``nunique``)."""
    ids = ["q\x00a", "q\x00b", "q\x00a", "q\ud800", "q\udc00"]
    frame = pd.DataFrame({"task": ["t"] * 5, "source_id": ids, "n": range(5)})
    assert len(frame.drop_duplicates(["task", "source_id"])) < 4  # why: pandas
    assert text.drop_duplicates(frame, ["task", "source_id"])["n"].tolist() == [0, 1, 3, 4]
    assert text.n_distinct(frame["source_id"]) == 4 and text.n_distinct(pd.Series([None, "a"])) == 1


def test_kvdiagnosis_views_count_sources_differing_after_a_nul_apart() -> None:
    """Table 3's and the demand profile's source counts, and TPBench's dialogue clusters."""
    frame = pd.DataFrame({"source_id": ["q\x00a", "q\x00b", "q\x00a"]})
    assert _profile(frame)["n_sources"] == 2
    low, high = cluster_interval([0.0, 1.0] * 4, ["d\x00a", "d\x00b"] * 4, n_boot=200)
    assert (low, high) == (0.0, 1.0)  # two dialogues resampled, not one of mean 0.5


def test_reader_audit_of_sources_differing_after_a_nul_is_the_plain_ids_audit(tmp_path: Path) -> None:
    """A reader-upgrade panel whose row ids share everything up to a NUL audits as the same panel with
    plain ids (pandas' pivot merged them into one row id and refused to reshape)."""
    readers = {
        "weak": ([1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 1, 0]),
        "strong": ([1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]),
    }
    plain = panel(readers)
    nul = copy.deepcopy(plain)
    for r in nul:
        r["key"] = r["key"].replace(f"/{r['source_id']}/", f"/q\x00{r['source_id']}/")
        r["source_id"] = f"q\x00{r['source_id']}"
    options = Options(n_splits=50, n_boot=50, seed=1, progress=False)
    want = run(write(tmp_path / "plain", plain), options).tables
    got = run(write(tmp_path / "nul", nul), options).tables
    for name in ("audit_readers", "audit_pairs", "audit_panel"):
        pd.testing.assert_frame_equal(got[name], want[name], obj=name)
    assert want["audit_panel"]["n_rows"].tolist()[0] == 6
