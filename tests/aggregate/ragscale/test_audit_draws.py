"""audit_draws (ragscale Table 16 and B.6): retention and excess-flip ranges over repeated artifact draws,
and the artifacts' byte-identity across draws, on hand-computed frames."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kvx.aggregate.ragscale.draws import audit_draws, draw_of, without_draw

D0, D1, D2 = "summary[reader=x]", "summary[draw=1,reader=x]", "summary[draw=2,draw_temperature=0.7,reader=x]"


def test_draws_of_one_artifact_form_one_group():
    assert {without_draw(e) for e in (D0, D1, D2)} == {"summary[reader=x]"}
    assert [draw_of(e) for e in (D0, D1, D2)] == [0, 1, 2]
    replayed = "replay[artifacts_sha256=ab12,compressor_id=llm-summary:q,draw=3]"
    assert without_draw(replayed) == "replay[compressor_id=llm-summary:q]" and draw_of(replayed) == 3
    assert without_draw("replay[draw=1]") == "replay"
    assert without_draw("summary[reader=y]") != without_draw(D0)  # another compressor reader: another group
    assert without_draw("bm25_top_k[k=3]") == "bm25_top_k[k=3]"
    # the matrix's compressor label, suffixed with the fields that vary across cells
    label = "none[transform.draw=1, transform.artifacts_sha256=ab, transform.reader=x]"
    assert without_draw(label, ", ") == "none[transform.reader=x]"
    assert without_draw("none[transform.draw=1, transform.draw_temperature=0.7]", ", ") == "none"


def frames():
    hashes = {  # row -> hash per draw (None: no text for that draw)
        "r1": ("a", "a", "a"),
        "r2": ("b", "b", "c"),
        "r3": ("d", "e", "d"),
        "r4": ("f", "f", "f"),
        "r5": ("g", None, "g"),  # not every draw has it: left out of the integrity shares
    }
    rows = [
        {
            "task": "hotpotqa",
            "evidence": e,
            "row_id": r,
            "reader": reader,
            "status": "supported",
            "text_hash": h[i],
        }
        for r, h in hashes.items()
        for i, e in enumerate((D0, D1, D2))
        for reader in ("a", "b")
    ]
    rows.append(
        {
            "task": "hotpotqa",
            "evidence": D1,
            "row_id": "r1",
            "reader": "c",
            "status": "error",
            "text_hash": "z",
        }
    )
    head = {"task": "hotpotqa", "setting": "-", "metric": "em"}
    # the matrix suffixes the compressor label with the transform fields that vary across cells
    press = {
        D0: "none",
        D1: "none[transform.draw=1]",
        D2: "none[transform.draw=2, transform.draw_temperature=0.7]",
        "bm25_top_k[k=3]": "none",
        f"{D0} -> {D1}": "none",
    }

    def at(evidence: str) -> dict:
        return head | {"evidence": evidence, "compressor": press[evidence]}

    pairs = pd.DataFrame(
        [at(e) | {"kind": "endpoints", "retention": v} for e, v in ((D0, 0.6), (D1, 0.4), (D2, np.nan))]
        + [at(D0) | {"kind": "declared", "retention": 0.9}]  # not the endpoint pair
    )
    panel = pd.DataFrame(
        [at(e) | {"excess_flips": v} for e, v in ((D2, 0.1), (D0, 0.3), (D1, 0.5))]
        + [at("bm25_top_k[k=3]") | {"excess_flips": 0.2}]  # one draw: no row
        + [at(f"{D0} -> {D1}") | {"excess_flips": 0.9}]  # an evidence swap (--swap) is no draw
    )
    return pd.DataFrame(rows), pairs, panel


def test_ranges_and_integrity_are_computed_by_hand():
    table = audit_draws(*frames())
    assert len(table) == 1
    row = table.iloc[0]
    assert (row["evidence"], row["n_draws"], row["draws"]) == ("summary[reader=x]", 3, "0,1,2")
    assert row["compressor"] == "none"
    assert (row["retention_min"], row["retention_max"]) == (0.4, 0.6)  # the undefined one left out
    assert (row["excess_flips_min"], row["excess_flips_max"]) == (0.1, 0.5)
    assert row["n_rows"] == 4 and row["identical_share"] == pytest.approx(2 / 4)  # r1, r4
    # pairs (0,1): r1 r2 r4 = 3/4; (0,2): r1 r3 r4 = 3/4; (1,2): r1 r4 = 2/4
    assert (row["pairwise_share_min"], row["pairwise_share_max"]) == (0.5, 0.75)


def test_no_panel_no_table():
    rows, pairs, panel = frames()
    assert audit_draws(rows, pairs, panel.iloc[:0]).empty
    assert audit_draws(rows, pairs, panel[panel["evidence"] != D1].iloc[:1]).empty


def test_row_ids_differing_after_a_nul_are_rows_of_their_own():
    """The same frames with row ids that agree up to a NUL give the same table (pandas' groupby merged
    the five rows into one)."""
    rows, pairs, panel = frames()
    nul = rows.assign(row_id=[f"r\x00{r}" for r in rows["row_id"]])
    pd.testing.assert_frame_equal(audit_draws(nul, pairs, panel), audit_draws(rows, pairs, panel))
