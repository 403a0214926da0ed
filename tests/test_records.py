"""Cell metrics by hand (KVDiagnosis section 3.3) and the record schema."""

from __future__ import annotations

import jsonschema
import pytest

from kvx.records import cell_metrics, transition, validate


def rec(status, full=None, comp=None):
    answer = lambda ok, score: {  # noqa: E731
        "output": "x",
        "normalized": "x",
        "score": score,
        "correct": ok,
        "token_ids": [1],
        "stop_reason": "eos",
    }
    f = answer(*full) if full else None
    c = answer(*comp) if comp else None
    return {
        "schema_version": "1",
        "key": "k",
        "status": status,
        "reason": "" if status == "supported" else "why",
        "task": "t",
        "source_id": "s",
        "reader": "r",
        "model_revision": "m",
        "compressor": "c",
        "seed": 0,
        "setting": {"ratio": 0.5, "retained_share": 0.5, "method_parameter": {}},
        "prompt_hash": "0" * 64,
        "n_context_tokens": 10,
        "n_question_tokens": 2,
        "full": f,
        "compressed": c,
        "transition": transition(f["correct"], c["correct"]) if (f and c) else None,
        "config_hash": "h",
        "versions": {},
    }


def test_cell_metrics_hand_computed():
    records = [
        rec("supported", (True, 1.0), (True, 1.0)),  # C→C
        rec("supported", (True, 1.0), (False, 0.5)),  # C→W
        rec("supported", (True, 1.0), (False, 0.0)),  # C→W
        rec("supported", (False, 0.5), (True, 1.0)),  # W→C
        rec("supported", (False, 0.0), (False, 0.0)),  # W→W
        rec("error", (True, 1.0)),
        rec("unsupported"),
    ]
    for r in records:
        validate(r)
    m = cell_metrics(records)
    assert (m["n_cc"], m["n_cw"], m["n_wc"], m["n_ww"]) == (1, 2, 1, 1)
    assert m["cw_denominator"] == 3 and m["cw_rate"] == pytest.approx(2 / 3)
    assert m["mean_score"] == pytest.approx((1 + 0.5 + 0 + 1 + 0) / 5)  # supported sources only
    assert m["accuracy"] == pytest.approx(2 / 5)
    assert m["n_error"] == 1 and m["n_unsupported"] == 1 and m["n_records"] == 7
    assert m["full_accuracy"] == pytest.approx(4 / 6)  # every source with a control


def test_cw_rate_is_absent_not_zero_without_fullcache_correct_sources():
    m = cell_metrics([rec("supported", (False, 0.0), (False, 0.0))])
    assert "cw_rate" not in m and m["cw_denominator"] == 0


def test_schema_rejects_unscored_supported_and_silent_unsupported():
    bad = rec("supported", (True, 1.0))
    with pytest.raises(jsonschema.ValidationError):
        validate(bad)
    silent = rec("unsupported")
    silent["reason"] = ""
    with pytest.raises(jsonschema.ValidationError):
        validate(silent)


def test_schema_requires_a_fullcache_partner_and_a_version():
    orphan = rec("supported", (True, 1.0), (True, 1.0))
    orphan["full"] = None
    with pytest.raises(jsonschema.ValidationError):
        validate(orphan)
    unversioned = rec("supported", (True, 1.0), (True, 1.0))
    del unversioned["schema_version"]
    with pytest.raises(jsonschema.ValidationError):
        validate(unversioned)
