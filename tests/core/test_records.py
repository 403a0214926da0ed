"""Cell metrics by hand (KVDiagnosis section 3.3) and the record schema."""

from __future__ import annotations

import jsonschema
import pytest

from kvx.core.records import ANSWER_COSTS, COMPRESSION_COSTS, Answer, Record, cell_metrics, schema, validate


def rec(status, full=None, comp=None):
    """A record written the way the app writes it: through ``Record``."""
    answer = lambda ok, score: Answer("x", "x", score, ok, [1], "eos")  # noqa: E731
    record = Record(
        key="k",
        status=status,
        reason="" if status == "supported" else "why",
        task="t",
        source_id="s",
        references=["x"],
        reader="r",
        model_revision="m",
        compressor="c",
        seed=0,
        setting={"kind": "ratio", "value": 0.5, "ratio": 0.5, "retained_share": 0.5, "method_parameter": {}},
        prompt_hash="0" * 64,
        n_context_tokens=10,
        n_question_tokens=2,
        config_hash="h",
        cell={"id": "0" * 16, "fields": {"task": "t"}},
        versions={},
        full=answer(*full) if full else None,
    )
    if full and comp:
        record.pair(record.full, answer(*comp))
    elif status != "supported":
        record.fail(status, "why")
    return record.to_dict()


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


def test_record_model_and_schema_describe_the_same_fields():
    """The dataclass is the writer; the schema is what readers check: they must not drift apart."""
    import dataclasses

    fields = {f.name: f for f in dataclasses.fields(Record)}
    assert set(fields) == set(schema()["properties"])
    required = {n for n, f in fields.items() if f.default is dataclasses.MISSING}
    required |= {"schema_version", "full", "compressed", "transition"}  # always written, may be null
    assert required == set(schema()["required"])
    answer_schema = schema()["$defs"]["answer"]
    assert {f.name for f in dataclasses.fields(Answer)} == set(answer_schema["properties"])
    optional = {f.name for f in dataclasses.fields(Answer) if not _no_default(f)}
    assert {f.name for f in dataclasses.fields(Answer)} - optional == set(answer_schema["required"])
    assert set(schema()["$defs"]["cost"]["properties"]) == {*ANSWER_COSTS, *COMPRESSION_COSTS}


def _no_default(f) -> bool:
    import dataclasses

    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def test_optional_fields_are_left_out_not_written_as_null():
    record = rec("supported", (True, 1.0), (True, 1.0))
    assert "diagnostics" not in record and "transform" not in record and "category" not in record
    assert record["full"] == {
        "output": "x",
        "normalized": "x",
        "score": 1.0,
        "correct": True,
        "token_ids": [1],
        "stop_reason": "eos",
    }
