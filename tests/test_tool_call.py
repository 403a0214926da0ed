"""tool_call task: first-object extraction, the five nested metrics, splits, and BFCL conversion."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import jsonschema
import pytest

from kvx.core.errors import ConfigError
from kvx.tasks import tool_call
from kvx.tasks.tool_call import (
    METRICS,
    BfclFiles,
    ToolCall,
    arguments_match,
    bfcl_gold,
    bfcl_requests,
    bfcl_schema,
    bfcl_standardize,
    evaluate,
    extract_first_object,
)
from kvx.tasks.tool_catalog import REQUESTS, TOOLS


def words(text: str) -> int:
    return len(text.split())


@pytest.fixture(scope="module")
def builtin() -> dict[str, object]:
    return {source.id: source for source in ToolCall().sources(len(REQUESTS), 0, 0, words)}


def judge(output: str, source) -> dict[str, float]:
    task = ToolCall()
    score = task.evaluate(output, source)
    metrics = score.metrics
    assert score.value == metrics["args_exact"] and score.correct == (metrics["args_exact"] == 1.0)
    assert metrics["json_valid"] >= metrics["name_match"] >= metrics["schema_valid"] >= metrics["args_exact"]
    return metrics


# ---------------------------------------------------------------- extraction


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('Sure! Here is the call: {"a": {"b": 1}} Hope it helps', '{"a": {"b": 1}}'),
        (
            '{"name": "x", "arguments": {"q": "a } b { c"}} tail',
            '{"name": "x", "arguments": {"q": "a } b { c"}}',
        ),
        ('{"q": "say \\"}\\" now"} x', '{"q": "say \\"}\\" now"}'),
        ('{"path": "C:\\\\"} }', '{"path": "C:\\\\"}'),
        ('first {"a": 1} then {"b": 2}', '{"a": 1}'),
        ("{'a': 1,}", "{'a': 1,}"),
        ("no object here", None),
        ('truncated {"a": {"b": 1}', None),
    ],
)
def test_extract_first_object(text: str, expected: str | None) -> None:
    assert extract_first_object(text) == expected


# ---------------------------------------------------------------- metrics


def test_exact_call_in_prose_scores_everything(builtin) -> None:
    source = builtin["tool_call_weather_paris"]
    call = '{"name": "get_weather", "arguments": {"days": 3, "city": "Paris"}}'
    output = f"Sure! Here is the call: {call} Hope it helps"
    assert judge(output, source) == dict.fromkeys(METRICS, 1.0)


def test_parameters_key_is_accepted(builtin) -> None:
    output = '{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}'
    assert judge(output, builtin["tool_call_weather_paris"])["args_exact"] == 1.0


def test_braces_and_escaped_quotes_inside_strings(builtin) -> None:
    source = builtin["tool_call_translate_fr"]
    wrong = '{"name": "translate_text", "arguments": {"text": "a } b { \\"c\\"", "target_language": "fr"}}'
    assert judge(wrong, source) == {**dict.fromkeys(METRICS, 1.0), "args_exact": 0.0}
    right = (
        '{"name": "translate_text", "arguments": {"text": "Where is the station?", "target_language": "fr"}}'
    )
    assert judge(right, source)["args_exact"] == 1.0


def test_first_object_wins(builtin) -> None:
    source = builtin["tool_call_air_delhi"]
    wrong = '{"name": "get_weather", "arguments": {"city": "Delhi"}}'
    right = '{"name": "get_air_quality", "arguments": {"city": "Delhi"}}'
    output = f"{wrong} or {right}"
    assert judge(output, source) == {**dict.fromkeys(METRICS, 0.0), "json_valid": 1.0, "name_substring": 1.0}


@pytest.mark.parametrize(
    "output",
    [
        '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3,}}',
        "{'name': 'get_weather', 'arguments': {'city': 'Paris', 'days': 3}}",
        '```json\n{"name": "get_weather", "arguments": {"city": "Paris"',
    ],
)
def test_invalid_json_keeps_the_string_anchor(builtin, output: str) -> None:
    metrics = judge(output, builtin["tool_call_weather_paris"])
    assert metrics == {**dict.fromkeys(METRICS, 0.0), "name_substring": 1.0}


def test_wrong_tool(builtin) -> None:
    output = '{"name": "get_air_quality", "arguments": {"city": "Paris"}}'
    metrics = judge(output, builtin["tool_call_weather_paris"])
    assert metrics == {**dict.fromkeys(METRICS, 0.0), "json_valid": 1.0}


@pytest.mark.parametrize(
    "arguments",
    [
        {"city": "Paris", "days": "3"},  # wrong type
        {"days": 3},  # missing required
        {"city": "Paris", "days": 3, "units": "kelvin"},  # enum violation
        {"city": "Paris", "days": 30},  # out of range
        {"city": "Paris", "days": 3, "country": "FR"},  # not in the schema (additionalProperties: false)
    ],
)
def test_schema_violations(builtin, arguments: dict) -> None:
    output = json.dumps({"name": "get_weather", "arguments": arguments})
    metrics = judge(output, builtin["tool_call_weather_paris"])
    assert (metrics["name_match"], metrics["schema_valid"]) == (1.0, 0.0)
    assert "schema:" in ToolCall().evaluate(output, builtin["tool_call_weather_paris"]).details["error"]


def test_defaults_spelled_out_or_omitted_are_the_same_call(builtin) -> None:
    paris = builtin["tool_call_weather_paris"]  # gold omits units (default celsius)
    call = {"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "units": "celsius"}}
    assert judge(json.dumps(call), paris)["args_exact"] == 1.0
    call["arguments"]["units"] = "fahrenheit"  # valid, but not the requested call
    assert judge(json.dumps(call), paris) == {**dict.fromkeys(METRICS, 1.0), "args_exact": 0.0}
    aapl = builtin["tool_call_stock_aapl"]  # gold spells out exchange=NASDAQ, the default
    assert judge('{"name": "get_stock_price", "arguments": {"ticker": "AAPL"}}', aapl)["args_exact"] == 1.0
    # an optional argument without a default is never omittable
    zuni = builtin["tool_call_table_zuni"]
    partial = dict(zuni.metadata["arguments"])
    del partial["special_requests"]
    assert judge(json.dumps({"name": "book_restaurant", "arguments": partial}), zuni)["args_exact"] == 0.0


def test_nested_arguments(builtin) -> None:
    source = builtin["tool_call_groceries_milk"]
    gold = json.loads(source.answers[0])
    reordered = {
        "name": "order_groceries",
        "arguments": {
            "delivery_address": {"postal_code": "12345", "city": "Springfield", "street": "5 Elm St"},
            "items": [{"quantity": 2, "name": "milk"}, {"quantity": 1, "name": "bread"}],
        },
    }
    assert judge(json.dumps(reordered), source)["args_exact"] == 1.0
    gold["arguments"]["items"][0]["quantity"] = 3
    assert judge(json.dumps(gold), source) == {**dict.fromkeys(METRICS, 1.0), "args_exact": 0.0}
    gold["arguments"]["items"][0]["quantity"] = "2"
    assert judge(json.dumps(gold), source)["schema_valid"] == 0.0


def test_value_comparison_is_typed() -> None:
    assert not arguments_match({"x": 1}, {"x": [True]})
    assert not arguments_match({"x": True}, {"x": [1]})
    assert arguments_match({"x": 2.0}, {"x": [2]})
    assert not arguments_match({"x": "2"}, {"x": [2]})
    assert arguments_match({"x": None}, {"x": [None]})
    assert not arguments_match({"x": "Paris"}, {"x": ["paris"]})
    assert not arguments_match({"x": 1, "y": 2}, {"x": [1]})


def test_details_report_the_extracted_object(builtin) -> None:
    details = ToolCall().evaluate('ok {"name": "nope"} done', builtin["tool_call_weather_paris"]).details
    assert details == {"extracted": '{"name": "nope"}', "error": "wrong tool: 'nope'", "scorer": "kvx"}


# ---------------------------------------------------------------- built-in catalog and splits


def test_catalog_is_well_formed() -> None:
    assert len(TOOLS) == 12 and len(REQUESTS) == 24
    names = [tool["name"] for tool in TOOLS]
    assert len(set(names)) == len(names)
    assert len({request.id for request in REQUESTS}) == len(REQUESTS)
    assert {request.name for request in REQUESTS} == set(names)
    for tool in TOOLS:
        jsonschema.Draft202012Validator.check_schema(tool["parameters"])
    kinds = json.dumps(TOOLS)
    for needle in ('"type": "integer"', '"type": "boolean"', '"type": "number"', '"enum"', '"type": "array"'):
        assert needle in kinds


def test_every_gold_call_scores_one(builtin) -> None:
    for source in builtin.values():
        assert judge(source.answers[0], source) == dict.fromkeys(METRICS, 1.0), source.id


def test_sources_share_the_catalog_and_point_at_the_gold_tool(builtin) -> None:
    contexts = {source.context for source in builtin.values()}
    assert len(contexts) == 1
    for source in builtin.values():
        ((start, end),) = source.evidence
        definition = json.loads(source.context[start:end])
        assert definition["name"] == source.metadata["name"]
        assert source.context[end] == "\n" and source.context[start - 1] == "\n"
        assert definition["parameters"] == source.metadata["schema"]
        assert source.metadata["name"] not in source.question
        assert source.metadata["prompt_tokens"] == words(f"{source.context}\n{source.question}")


def test_sources_are_deterministic_in_seed() -> None:
    task = ToolCall()
    first = task.sources(8, 3, 0, words)
    assert [s.digest() for s in first] == [s.digest() for s in task.sources(8, 3, 0, words)]
    assert [s.id for s in first] != [s.id for s in task.sources(8, 4, 0, words)]
    assert [s.id for s in task.sources(12, 3, 0, words)][:8] == [s.id for s in first]
    with pytest.raises(ValueError, match="24 requests"):
        task.sources(25, 0, 0, words)


def test_bad_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="task.source"):
        ToolCall(source="web")
    with pytest.raises(ConfigError, match="task.bfcl_category"):
        ToolCall(bfcl_category="multi_turn_base")


# ---------------------------------------------------------------- BFCL


def entry(entry_id: str, name: str, properties: dict, required: list[str], text: str = "do it") -> dict:
    function = {
        "name": name,
        "description": f"{name} tool.",
        "parameters": {"type": "dict", "properties": properties, "required": required},
    }
    return {"id": entry_id, "question": [[{"role": "user", "content": text}]], "function": [function]}


def test_bfcl_schema_conversion() -> None:
    native = {
        "type": "dict",
        "properties": {
            "rate": {"type": "float", "description": "r"},
            "point": {"type": "tuple", "items": {"type": "integer"}},
            "anything": {"type": "any", "description": "free"},
            "filters": {"type": "dict", "properties": {"score": {"type": "float"}}},
            "rows": {"type": "array", "items": {"type": "dict", "properties": {"k": {"type": "string"}}}},
            "metrics": {"type": "array", "items": {"type": "string"}, "enum": ["a", "b"]},
        },
        "required": ["rate"],
        "optional": ["point"],
    }
    schema = bfcl_schema(native)
    assert schema == {
        "type": "object",
        "properties": {
            "rate": {"type": "number", "description": "r"},
            "point": {"type": "array", "items": {"type": "integer"}},
            "anything": {"description": "free"},
            "filters": {"type": "object", "properties": {"score": {"type": "number"}}},
            "rows": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
            "metrics": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
        },
        "required": ["rate"],
        "optional": ["point"],
    }
    jsonschema.Draft202012Validator.check_schema(schema)
    with pytest.raises(ValueError, match="HashMap"):
        bfcl_schema({"type": "HashMap"})


def test_bfcl_acceptable_values() -> None:
    acceptable = {
        "city": ["San Francisco, CA", "SF"],
        "unit": ["", "celsius"],
        "days": [3],
        "filters": [{"kind": ["museum"], "free": ["", True]}],
        "rows": [[{"name": ["Ann"], "age": [30]}]],
        "tags": [["a-b", "c"]],
    }
    std = bfcl_standardize
    assert arguments_match(
        {
            "city": "san francisco,ca",
            "days": 3,
            "filters": {"kind": "Museum"},
            "rows": [{"name": "ann", "age": 30}],
            "tags": ["AB", "c"],
        },
        acceptable,
        std,
    )
    base = {
        "city": "SF",
        "days": 3,
        "filters": {"kind": "museum"},
        "rows": [{"name": "Ann", "age": 30}],
        "tags": ["a-b", "c"],
    }
    assert arguments_match({**base, "unit": "celsius"}, acceptable, std)
    assert not arguments_match({**base, "unit": "kelvin"}, acceptable, std)
    assert not arguments_match({**base, "days": 4}, acceptable, std)
    assert not arguments_match({k: v for k, v in base.items() if k != "days"}, acceptable, std)
    assert not arguments_match({**base, "filters": {"kind": "museum", "open": True}}, acceptable, std)
    assert not arguments_match({**base, "tags": ["c", "a-b"]}, acceptable, std)
    schema = {"properties": {"days": {}, "unit": {}, "rows": {"items": {}}}, "required": ["days", "unit"]}
    assert bfcl_gold(acceptable, schema) == {
        "city": "San Francisco, CA",
        "unit": "celsius",  # required, so the first non-omission
        "days": 3,
        "filters": {"kind": "museum"},
        "rows": [{"name": "Ann", "age": 30}],
        "tags": ["a-b", "c"],
    }


def test_bfcl_requests_join_and_filter() -> None:
    entries = [
        entry(
            "simple_0",
            "area",
            {"base": {"type": "integer"}, "unit": {"type": "string"}},
            ["base"],
            "Area of 10",
        ),
        entry("simple_1", "empty", {"xs": {"type": "array", "items": {"type": "string"}}}, ["xs"]),
    ]
    answers = [
        {"id": "simple_0", "ground_truth": [{"area": {"base": [10], "unit": ["units", ""]}}]},
        {"id": "simple_1", "ground_truth": [{"empty": {"xs": []}}]},  # unanswerable: dropped
    ]
    (request,) = bfcl_requests(entries, answers)
    assert request["arguments"] == {"base": 10, "unit": "units"}
    assert request["tool"]["parameters"]["type"] == "object"
    assert request["text"] == "Area of 10"


@pytest.fixture
def fake_bfcl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A BFCL category in native format: 6 requests (one reusing a name for another tool) + 30 distractors."""
    entries, answers = [], []
    for i in range(36):
        name = "tool_0" if i == 5 else f"tool_{i}"
        props = {"x": {"type": "integer", "description": "padding " * 10}}
        if i == 5:
            props["y"] = {"type": "float"}
        entries.append(entry(f"simple_{i}", name, props, ["x"], f"call {name} with {i}"))
        answers.append({"id": f"simple_{i}", "ground_truth": [{name: {"x": [i]}}]})
    for stem, rows in (("entries", entries), ("answers", answers)):
        (tmp_path / f"{stem}.json").write_text("".join(json.dumps(row) + "\n" for row in rows))
    files = BfclFiles(tmp_path / "entries.json", tmp_path / "answers.json", "test")
    monkeypatch.setattr(tool_call, "bfcl_files", lambda category: files)


def test_bfcl_split_shares_a_catalog_sized_to_the_budget(fake_bfcl: None) -> None:
    task = ToolCall(source="bfcl")
    small, large = task.sources(6, 1, 600, words), task.sources(6, 1, 1500, words)
    assert small[0].metadata["catalog_tools"] < large[0].metadata["catalog_tools"]
    for split, budget in ((small, 600), (large, 1500)):
        assert len({source.context for source in split}) == 1
        assert len({source.metadata["name"] for source in split}) == 6  # tool_0 twice would be ambiguous
        for source in split:
            assert source.metadata["prompt_tokens"] <= budget
            ((start, end),) = source.evidence
            assert json.loads(source.context[start:end])["name"] == source.metadata["name"]
            assert judge(source.answers[0], source) == dict.fromkeys(METRICS, 1.0)
            assert source.metadata["bfcl_version"] == "test"
    assert [s.digest() for s in small] == [s.digest() for s in task.sources(6, 1, 600, words)]
    with pytest.raises(ValueError, match="too small"):
        task.sources(6, 1, 100, words)


def test_bfcl_string_standardisation_applies(fake_bfcl: None) -> None:
    source = ToolCall(source="bfcl").sources(1, 0, 2000, words)[0]
    name, x = source.metadata["name"], source.metadata["arguments"]["x"]
    assert judge(json.dumps({"name": name, "arguments": {"x": float(x)}}), source)["args_exact"] == 1.0
    assert source.metadata["strings"] == "bfcl"


def test_missing_bfcl_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "bfcl_eval", None)
    with pytest.raises(ConfigError, match=r"pip install --no-deps bfcl-eval==\d"):
        ToolCall(source="bfcl")
    ToolCall()  # the built-in catalog needs nothing


@pytest.mark.skipif(importlib.util.find_spec("bfcl_eval") is None, reason="bfcl-eval is not installed")
@pytest.mark.parametrize("category", tool_call.BFCL_CATEGORIES)
def test_real_bfcl_category(category: str) -> None:
    files = tool_call.bfcl_files(category)
    entries = [json.loads(line) for line in files.entries.read_text(encoding="utf-8").splitlines()]
    answers = [json.loads(line) for line in files.answers.read_text(encoding="utf-8").splitlines()]
    requests = bfcl_requests(entries, answers)
    assert len(requests) >= 0.99 * len(entries)
    for request in requests:
        jsonschema.Draft202012Validator.check_schema(request["tool"]["parameters"])
    sources = ToolCall(source="bfcl", bfcl_category=category).sources(5, 0, 3000, words)
    assert len({source.context for source in sources}) == 1
    for source in sources:
        assert source.metadata["prompt_tokens"] <= 3000
        assert evaluate(
            source.answers[0],
            source.metadata["name"],
            source.metadata["schema"],
            source.metadata["acceptable"],
            "bfcl",
        ).metrics == dict.fromkeys(METRICS, 1.0)
