"""kv-exec-bench as published: the paper's catalog and prompts, and its scorers against kvx's.

Each parity test scores one hand-made reply under both scorers and pins where they part, so it fails
under the other one. The rules are the release's (pjdurden/kv-exec-bench ``kv_exec_bench/datasets.py``
and ``kv_exec_bench/scorers.py``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import jsonschema
import pytest

from kvx.core.errors import ConfigError
from kvx.core.identity import CellIdentity, SettingSpec, component
from kvx.core.source import Source
from kvx.tasks import kv_exec_bench_catalog as paper
from kvx.tasks.code_exec import CodeExec, assemble_raw
from kvx.tasks.tool_call import ToolCall, first_parsing_object
from kvx.tasks.tool_catalog import REQUESTS
from kvx.testing.cli import composed, plan
from kvx.testing.code_exec import BODY, PROMPT, SOURCE, TEST, FakeExecutor


def words(text: str) -> int:
    return len(text.split())


KVX, KEB = ToolCall(), ToolCall(scorer="kv_exec_bench")
PAPER = {source.id: source for source in ToolCall(catalog="kv_exec_bench").sources(9, 0, 0, words)}
KVX_CATALOG = {source.id: source for source in ToolCall().sources(len(REQUESTS), 0, 0, words)}
PARIS = PAPER["kv_exec_bench_weather_paris"]


def both(reply: str, source: Source) -> tuple[dict[str, float], dict[str, float]]:
    """(kvx's metrics, kv-exec-bench's metrics) of one reply."""
    return KVX.evaluate(reply, source).metrics, KEB.evaluate(reply, source).metrics


def flags(json_valid: int, name_match: int, schema_valid: int, args_exact: int, name_substring: int) -> dict:
    values = (json_valid, name_match, schema_valid, args_exact, name_substring)
    names = ("json_valid", "name_match", "schema_valid", "args_exact", "name_substring")
    return {name: float(value) for name, value in zip(names, values)}


# ---------------------------------------------------------------- the paper's catalog and prompt


def test_the_catalog_is_the_releases_text() -> None:
    context, spans = paper.render(paper.TOOLS)
    # sha256 of the release's render_catalog() output, computed once from the release itself
    digest = "58f6477ada0b52ec2add87006bdfff997b424aff3f0184b663da087fbe644ba6"
    assert hashlib.sha256(context.encode()).hexdigest() == digest
    assert context.startswith(paper.HEADER) and '{"name": <tool name>, "arguments"' in paper.HEADER
    first = (
        "1. get_weather — Get the current weather for a city.\n"
        '   parameters (JSON Schema): {"type": "object", "properties": {"city": {"type": "string"}, '
        '"units": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"], '
        '"additionalProperties": false}'
    )
    start, end = spans["get_weather"]
    assert context[start:end] == first and context[end] == "\n"
    assert len(paper.TOOLS) == 12 and len(spans) == 12


def test_nine_requests_in_the_releases_order() -> None:
    assert [(r.name, r.arguments) for r in paper.REQUESTS] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Tokyo", "units": "f"}),
        ("get_stock_price", {"ticker": "AAPL"}),
        ("send_email", {"to": "alice@example.com", "subject": "Hello"}),
        ("create_calendar_event", {"title": "Dentist", "date": "2026-07-01"}),
        ("convert_currency", {"amount": 100, "from_currency": "USD", "to_currency": "EUR"}),
        ("search_flights", {"origin": "SFO", "destination": "JFK", "date": "2026-08-12"}),
        ("translate_text", {"text": "good morning", "target_language": "Spanish"}),
        ("set_reminder", {"message": "call mom", "time": "18:00"}),
    ]
    schemas = {tool["name"]: tool["parameters"] for tool in paper.TOOLS}
    for request in paper.REQUESTS:
        jsonschema.validate(request.arguments, schemas[request.name])


def test_sources_share_the_catalog_with_the_format_inside_and_point_at_the_gold_tool() -> None:
    task = ToolCall(catalog="kv_exec_bench")
    assert task.max_new_tokens == 128 and ToolCall().max_new_tokens == 96
    sources = task.sources(9, 0, 0, words)
    assert [s.id for s in sources] == [f"kv_exec_bench_{r.id}" for r in paper.REQUESTS]
    assert [s.id for s in task.sources(3, 7, 0, words)] == [s.id for s in sources[:3]]  # first n, any seed
    assert {s.context for s in sources} == {paper.render(paper.TOOLS)[0]}
    for source, request in zip(sources, paper.REQUESTS):
        assert source.question == f"\nUser request: {request.text}\n"
        ((start, end),) = source.evidence
        assert source.context[start:end].split(" — ")[0].endswith(f". {request.name}")
        assert json.loads(source.answers[0]) == {"name": request.name, "arguments": request.arguments}
        assert KEB.evaluate(source.answers[0], source).value == 1.0
    with pytest.raises(ValueError, match="has 9 requests"):
        task.sources(10, 0, 0, words)


def test_code_exec_release_prompt_and_budget() -> None:
    release = CodeExec(prompt="kv_exec_bench", problems="HumanEval/0")
    assert release.max_new_tokens == 512 and CodeExec().max_new_tokens == 320
    (source,) = release.sources(1, 0, 0, words)
    assert source.question == "" and source.context == source.metadata["prompt"]
    (kvx_source,) = CodeExec(problems="HumanEval/0").sources(1, 0, 0, words)
    assert kvx_source.context == source.context and "```python" in kvx_source.question


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: ToolCall(catalog="paper"), "task.catalog"),
        (lambda: ToolCall(scorer="strict"), "task.scorer"),
        (lambda: ToolCall(source="bfcl", scorer="kv_exec_bench"), "task.source=bfcl"),
        (lambda: CodeExec(prompt="paper"), "task.prompt"),
        (lambda: CodeExec(scorer="paper"), "task.scorer"),
    ],
)
def test_unknown_options_are_config_errors(make, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        make()


# ---------------------------------------------------------------- tool_call scorer parity


def test_schema_is_checked_whatever_the_name() -> None:
    kvx, keb = both('{"name": "get_stock_price", "arguments": {"city": "Paris"}}', PARIS)
    assert kvx == flags(1, 0, 0, 0, 0)  # kvx: a wrong tool is not a schema-valid call
    assert keb == flags(1, 0, 1, 1, 0)  # the release: the arguments alone validate and equal the gold


def test_a_malformed_first_object_is_skipped() -> None:
    good = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    reply = '{"name": "get_weather", "arguments": {city: Paris}} ' + good
    assert first_parsing_object(reply)[1] == {"name": "get_weather", "arguments": {"city": "Paris"}}
    kvx, keb = both(reply, PARIS)
    assert kvx == flags(0, 0, 0, 0, 1)
    assert keb == flags(1, 1, 1, 1, 1)


def test_an_unclosed_call_yields_its_inner_object() -> None:
    kvx, keb = both('{"name": "get_weather", "arguments": {"city": "Paris"}', PARIS)
    assert kvx == flags(0, 0, 0, 0, 1)
    assert keb == flags(1, 0, 0, 0, 1)  # {"city": "Paris"} parses: no name, no "arguments"


def test_args_exact_is_plain_equality() -> None:
    # kvx's catalog: get_weather's units default "celsius"; spelled out, kvx accepts it, the release does not
    source = KVX_CATALOG["tool_call_weather_paris"]
    reply = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "units": "celsius"}}'
    kvx, keb = both(reply, source)
    assert kvx == flags(1, 1, 1, 1, 1) and keb == flags(1, 1, 1, 0, 1)
    # where both agree: a number equals its float spelling
    assert both('{"name": "get_weather", "arguments": {"city": "Paris", "days": 3.0}}', source) == (
        flags(1, 1, 1, 1, 1),
        flags(1, 1, 1, 1, 1),
    )


def test_arguments_key_only() -> None:
    kvx, keb = both('{"name": "get_weather", "parameters": {"city": "Paris"}}', PARIS)
    assert kvx == flags(1, 1, 1, 1, 1)  # kvx reads Llama-style "parameters" too
    assert keb == flags(1, 1, 0, 0, 1)  # the release reads "arguments" only: None is no object


def test_name_substring_is_the_raw_output_under_both() -> None:
    """The one rule both share: the gold name anywhere in the raw reply, JSON or not."""
    assert both("I would call get_weather for that.", PARIS) == (flags(0, 0, 0, 0, 1), flags(0, 0, 0, 0, 1))
    assert both('{"name": "get_Weather"}', PARIS)[1]["name_substring"] == 0.0


def test_details_name_the_scorer() -> None:
    assert KVX.evaluate("{}", PARIS).details["scorer"] == "kvx"
    assert KEB.evaluate("{}", PARIS).details["scorer"] == "kv_exec_bench"


# ---------------------------------------------------------------- code_exec scorer parity


FENCED = f"```\n{BODY}```"


def test_edit_sim_on_the_raw_output_vs_the_extracted_body() -> None:
    kvx, keb = CodeExec(), CodeExec(scorer="kv_exec_bench")
    for task in (kvx, keb):
        task._executor, task._enabled_by = FakeExecutor("fail"), "env"
    assert kvx.evaluate(FENCED, SOURCE).metrics["edit_sim"] == 1.0
    # the raw reply (4 + 19 + 3 characters) holds the 19-character body whole: 2 * 19 / (26 + 19)
    assert len(FENCED) == 26 and len(BODY) == 19
    assert keb.evaluate(FENCED, SOURCE).metrics["edit_sim"] == pytest.approx(38 / 45)
    assert keb.evaluate(FENCED, SOURCE).details["scorer"] == "kv_exec_bench"


def test_the_program_is_prompt_plus_raw_output() -> None:
    kvx, keb = CodeExec(), CodeExec(scorer="kv_exec_bench")
    fakes = [FakeExecutor("pass"), FakeExecutor("pass")]
    for task, fake in zip((kvx, keb), fakes):
        task._executor, task._enabled_by = fake, "env"
        task.evaluate(FENCED, SOURCE)
    assert fakes[1].programs == [f"{PROMPT}{FENCED}\n\n{TEST}\n\ncheck(total)\n"]
    assert fakes[1].programs == [assemble_raw(FENCED, PROMPT, TEST, "total")]
    assert fakes[0].programs == [f"{PROMPT}{BODY}\n\n{TEST}\n\ncheck(total)\n"]  # kvx unwraps the fence


# ---------------------------------------------------------------- identity and the preset


def test_the_scorer_is_part_of_the_cell() -> None:
    def identity(task: ToolCall) -> CellIdentity:
        return CellIdentity(
            task=component("tool_call", task, scorer_version=type(task).scorer_version),
            reader={"name": "tiny"},
            transform={"name": "none"},
            compressor={"name": "none"},
            setting=SettingSpec("none", None),
            seed=0,
            n_sources=9,
            context_tokens=1024,
            max_new_tokens=96,
            query_aware=False,
        )

    assert "scorer" not in component("tool_call", KVX)["fields"]  # unset: existing cells keep their ids
    kvx, keb = identity(KVX), identity(KEB)
    assert kvx.id != keb.id and kvx.split != keb.split and kvx.answer_fields() != keb.answer_fields()
    assert keb.flat()["task.scorer"] == "kv_exec_bench"


@pytest.mark.slow
def test_table1_runs_both_studies_as_sweeps_of_the_five_presses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvx.tasks import executor

    monkeypatch.setenv("KVX_ALLOW_CODE_EXECUTION", "1")
    # the composition is under test, not this machine's sandbox (tests/tasks/test_executor_sandbox.py)
    monkeypatch.setattr(executor, "isolation_available", lambda isolation, python=None: (True, ""))
    given = ["+experiment=kv_exec_bench/table1", "reader=tiny", f"outputs_dir={tmp_path}"]
    parts = plan(*given, "tool_call:n_sources=1", "code_exec:n_sources=1")
    assert [p["part"] for p in parts] == ["kv_exec_bench/tool_call", "kv_exec_bench/code_exec"]
    grid = {("press", p) for p in ["random", "streaming_llm", "snapkv", "knorm", "expected_attention_plain"]}
    grid = {(a, b, "ratio", r) for a, b in grid for r in ("0.25", "0.5", "0.75")}
    for part in parts:  # every cell of both parts composed and checked: 5 presses x 3 ratios each
        axes = {
            tuple(x for o in c["overrides"] if o.startswith(("press=", "ratio=")) for x in o.split("="))
            for c in part["cells"]
        }
        assert axes == grid and len(part["cells"]) == 15
    expected = {
        "kv_exec_bench/tool_call": {"task": "tool_call", "catalog": "kv_exec_bench", "n_sources": 9},
        "kv_exec_bench/code_exec": {"task": "code_exec", "prompt": "kv_exec_bench", "n_sources": 10},
    }
    for name, want in expected.items():
        cfg = composed(f"+experiment={name}", return_hydra=True)
        assert cfg.hydra.runtime.choices.task == want["task"] and cfg.n_sources == want["n_sources"]
        assert cfg.task.scorer == "kv_exec_bench" and list(cfg.diagnostics) == []
        field = "catalog" if want["task"] == "tool_call" else "prompt"
        assert cfg.task[field] == want[field]
    problems = composed("+experiment=kv_exec_bench/code_exec").task.problems
    assert problems == ",".join(f"HumanEval/{i}" for i in range(10))


def test_a_misspelled_option_names_the_closest_one() -> None:
    from kvx.tasks.code_exec import CodeExec
    from kvx.tasks.tool_call import ToolCall

    with pytest.raises(
        ConfigError, match=r"task.scorer='kv_exec_bnch' is not one of .*did you mean 'kv_exec_bench'\?"
    ):
        ToolCall(scorer="kv_exec_bnch")
    with pytest.raises(ConfigError, match=r"task.catalog='kvexecbench' .*did you mean 'kv_exec_bench'\?"):
        ToolCall(catalog="kvexecbench")
    with pytest.raises(ConfigError, match=r"task.prompt='kv_exec' .*did you mean 'kv_exec_bench'\?"):
        CodeExec(prompt="kv_exec")
    with pytest.raises(ConfigError, match=r"task.source='bfc' .*did you mean 'bfcl'\?"):
        ToolCall(source="bfc")
