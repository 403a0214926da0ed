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
    bfcl_names,
    bfcl_requests,
    bfcl_schema,
    bfcl_shards,
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
    (request,), excluded = bfcl_requests(entries, answers)
    assert list(excluded) == ["simple_1"]
    assert excluded["simple_1"].startswith("its ground truth contradicts its schema, no call can score")
    assert request["arguments"] == {"base": 10, "unit": "units"}
    assert request["tool"]["parameters"]["type"] == "object"
    assert request["text"] == "Area of 10"


def write_bfcl(folder: Path, entries: list[dict], answers: list[dict]) -> BfclFiles:
    """A category in the package's layout: one JSON object a line, entries and ground truth apart."""
    for stem, rows in (("entries", entries), ("answers", answers)):
        (folder / f"{stem}.json").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return BfclFiles(folder / "entries.json", folder / "answers.json", "test")


@pytest.fixture
def fake_bfcl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A BFCL category in native format: 36 requests, simple_5 reusing tool_0's name for another tool."""
    entries, answers = [], []
    for i in range(36):
        name = "tool_0" if i == 5 else f"tool_{i}"
        props = {"x": {"type": "integer", "description": "padding " * 10}}
        if i == 5:
            props["y"] = {"type": "float"}
        entries.append(entry(f"simple_{i}", name, props, ["x"], f"call {name} with {i}"))
        answers.append({"id": f"simple_{i}", "ground_truth": [{name: {"x": [i]}}]})
    files = write_bfcl(tmp_path, entries, answers)
    monkeypatch.setattr(tool_call, "bfcl_files", lambda category: files)


def test_bfcl_split_shares_a_catalog_sized_to_the_budget(fake_bfcl: None) -> None:
    task = ToolCall(source="bfcl")
    small, large = task.sources(6, 1, 600, words), task.sources(6, 1, 1500, words)
    assert small[0].metadata["catalog_tools"] < large[0].metadata["catalog_tools"]
    for split, budget in ((small, 600), (large, 1500)):
        assert len({source.context for source in split}) == 1
        assert len({source.metadata["name"] for source in split}) == 6  # tool_0 twice: tool_0_v2
        for source in split:
            assert source.metadata["prompt_tokens"] <= budget
            ((start, end),) = source.evidence
            assert json.loads(source.context[start:end])["name"] == source.metadata["name"]
            assert judge(source.answers[0], source) == dict.fromkeys(METRICS, 1.0)
            assert source.metadata["bfcl_version"] == "test"
    assert [s.digest() for s in small] == [s.digest() for s in task.sources(6, 1, 600, words)]
    with pytest.raises(ValueError, match="too small: the catalog of BFCL tool"):
        task.sources(6, 1, 30, words)  # one tool (about 20 words) and its request do not fit


def test_bfcl_names_keep_the_first_definition_and_suffix_the_others() -> None:
    def tool(name: str, version: int) -> dict:
        return {"name": name, "description": f"v{version}", "parameters": {}}

    tools = [tool("a", 1), tool("b", 1), tool("a", 2), tool("a", 1), tool("a", 3), tool("b", 1)]
    assert bfcl_names(tools) == ["a", "b", "a_v2", "a", "a_v3", "b"]
    with pytest.raises(ValueError, match="already names a tool 'a_v2'"):
        bfcl_names([tool("a", 1), tool("a", 2), tool("a_v2", 1)])


def test_bfcl_shards_are_next_fit_and_refuse_a_tool_over_the_budget() -> None:
    sizes = {"a": 3, "b": 4, "c": 2, "d": 5, "e": 1}
    measure = lambda names: sum(sizes[name] for name in names)  # noqa: E731
    assert bfcl_shards(list(sizes), measure, 7) == [["a", "b"], ["c", "d"], ["e"]]
    assert bfcl_shards(list(sizes), measure, 15) == [list(sizes)]
    assert bfcl_shards(["a", "b", "c"], measure, 9) == [["a", "b", "c"]]
    with pytest.raises(ValueError, match="context_tokens=4 is too small: the catalog of BFCL tool 'd'"):
        bfcl_shards(list(sizes), measure, 4)


def test_every_bfcl_request_runs_in_exactly_one_shard_within_budget(fake_bfcl: None) -> None:
    task = ToolCall(source="bfcl")
    sources = task.sources(36, 2, 120, words)
    assert sorted(s.id for s in sources) == sorted(f"bfcl_simple_{i}" for i in range(36))
    shards = [s.metadata["shard"] for s in sources]
    assert shards == sorted(shards)  # shard by shard: the engine compresses each catalog once
    assert set(shards) == set(range(sources[0].metadata["shards"])) and len(set(shards)) > 2
    contexts: dict[int, set[str]] = {}
    for source in sources:
        contexts.setdefault(source.metadata["shard"], set()).add(source.context)
        assert source.metadata["prompt_tokens"] <= 120
        ((start, end),) = source.evidence
        assert json.loads(source.context[start:end])["name"] == source.metadata["name"]
        assert judge(source.answers[0], source) == dict.fromkeys(METRICS, 1.0)
        listed = [json.loads(line)["name"] for line in source.context.splitlines()[1:]]
        assert len(listed) == source.metadata["catalog_tools"] == len(set(listed))
    assert all(len(texts) == 1 for texts in contexts.values())  # one shared context per shard
    assert len({text for texts in contexts.values() for text in texts}) == len(contexts)
    # every shard is full: its longest prompt has no room for the shortest tool line of the category
    shortest = min(words(line) for line in sources[0].context.splitlines()[1:])
    for texts in contexts.values():
        longest = max(s.metadata["prompt_tokens"] for s in sources if s.context in texts)
        assert longest + shortest > 120
    assert [s.digest() for s in sources] == [s.digest() for s in task.sources(36, 2, 120, words)]
    smaller = task.sources(12, 2, 120, words)
    last = smaller[-1].metadata["shard"]
    kept = [s for s in smaller if s.metadata["shard"] < last]
    assert kept and [(s.id, s.context, s.metadata["shard"]) for s in kept] == [
        (s.id, s.context, s.metadata["shard"]) for s in sources[: len(kept)]
    ]  # a smaller split repeats a larger one's catalogs, all but its last: their controls serve both


def test_a_bfcl_shard_reserves_room_for_unchosen_requests_of_its_tools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """t0 is also called by a long request: a split without it must still build t0's shard as a split
    with it does (else a larger split would change a smaller one's catalogs and their controls)."""
    entries = [
        entry(f"simple_{i}", f"t{i}", {"x": {"type": "integer"}}, ["x"], f"call t{i}") for i in range(8)
    ]
    entries.append(entry("simple_8", "t0", {"x": {"type": "integer"}}, ["x"], "call t0 " + "now " * 40))
    answers = [{"id": f"simple_{i}", "ground_truth": [{f"t{i % 8}": {"x": [i]}}]} for i in range(9)]
    files = write_bfcl(tmp_path, entries, answers)
    monkeypatch.setattr(tool_call, "bfcl_files", lambda category: files)
    orders = {seed: tool_call.seeded_order(9, 9, seed) for seed in range(200)}
    seed = next(seed for seed, order in orders.items() if order[0] == 0 and order[-1] == 8)
    task = ToolCall(source="bfcl")
    every, part = task.sources(9, seed, 110, words), task.sources(8, seed, 110, words)
    assert part[0].id == "bfcl_simple_0" and "bfcl_simple_8" not in {s.id for s in part}
    assert part[0].context == every[0].context and every[0].metadata["shards"] > 2


def test_colliding_bfcl_names_both_run_and_score_against_the_shown_name(fake_bfcl: None) -> None:
    sources = {s.id: s for s in ToolCall(source="bfcl").sources(36, 0, 10**6, words)}
    first, second = sources["bfcl_simple_0"], sources["bfcl_simple_5"]
    assert (first.metadata["name"], second.metadata["name"]) == ("tool_0", "tool_0_v2")
    assert first.metadata["bfcl_name"] == second.metadata["bfcl_name"] == "tool_0"
    assert first.context == second.context  # one catalog holds both definitions, apart by name
    ((start, end),) = second.evidence
    assert set(json.loads(second.context[start:end])["parameters"]["properties"]) == {"x", "y"}
    assert json.loads(second.answers[0]) == {"name": "tool_0_v2", "arguments": {"x": 5}}
    assert judge(second.answers[0], second)["args_exact"] == 1.0
    bare = json.dumps({"name": "tool_0", "arguments": {"x": 5}})  # the other definition's name
    assert judge(bare, second) == {**dict.fromkeys(METRICS, 0.0), "json_valid": 1.0}
    # the string anchor still finds "tool_0" inside "tool_0_v2": a suffixed name contains the bare one
    other = json.dumps({"name": "tool_0_v2", "arguments": {"x": 0}})
    assert judge(other, first) == {**dict.fromkeys(METRICS, 0.0), "json_valid": 1.0, "name_substring": 1.0}


def test_bfcl_entries_left_out_are_counted_with_their_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    props = {"xs": {"type": "array", "items": {"type": "string"}}}
    entries = [
        entry("simple_0", "keep", {"x": {"type": "integer"}}, ["x"]),
        entry("simple_1", "empty", props, ["xs"]),
        {**entry("simple_2", "pair", {}, []), "function": [entry("", "p", {}, [])["function"][0]] * 2},
        entry("simple_3", "orphan", {}, []),
        entry("simple_4", "mine", {}, []),
    ]
    answers = [
        {"id": "simple_0", "ground_truth": [{"keep": {"x": [1]}}]},
        {"id": "simple_1", "ground_truth": [{"empty": {"xs": []}}]},
        {"id": "simple_2", "ground_truth": [{"p": {}}]},
        {"id": "simple_4", "ground_truth": [{"theirs": {}}]},
    ]
    files = write_bfcl(tmp_path, entries, answers)
    monkeypatch.setattr(tool_call, "bfcl_files", lambda category: files)
    manifest = ToolCall(source="bfcl").manifest(1, 0)
    assert {k: manifest[k] for k in ("entries", "runnable", "renamed")} == {
        "entries": 5,
        "runnable": 1,
        "renamed": 0,
    }
    assert list(manifest["excluded"]) == ["simple_1", "simple_2", "simple_3", "simple_4"]
    assert manifest["excluded"]["simple_2"] == "2 tools, 1 gold calls: not one call"
    assert manifest["excluded"]["simple_3"] == "no ground truth"
    assert manifest["excluded"]["simple_4"] == "the gold call names 'theirs', its tool is 'mine'"
    assert ToolCall().manifest(1, 0) is None
    with pytest.raises(ValueError, match="1 runnable requests of 5; asked for 2 .left out: simple_1: its gr"):
        ToolCall(source="bfcl").sources(2, 0, 10**6, words)


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
    requests, excluded = bfcl_requests(entries, answers)
    assert len(requests) + len(excluded) == len(entries) and len(requests) >= 0.99 * len(entries)
    if files.version == tool_call.BFCL_VERSION:  # every item runs but two that no call can satisfy
        assert (len(requests), sorted(excluded)) == {
            "simple_python": (400, []),
            "live_simple": (256, ["live_simple_106-63-0", "live_simple_112-68-0"]),
        }[category]
    for request in requests:
        jsonschema.Draft202012Validator.check_schema(request["tool"]["parameters"])
    task = ToolCall(source="bfcl", bfcl_category=category)
    every = task.sources(len(requests), 0, 4096, words)
    assert sorted(s.id for s in every) == sorted(f"bfcl_{r['id']}" for r in requests)
    assert max(s.metadata["prompt_tokens"] for s in every) <= 4096 and every[0].metadata["shards"] > 1
    sources = task.sources(5, 0, 3000, words)
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
