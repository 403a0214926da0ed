"""Run engine: one control per source, one prefill per source, no silent losses, kvpress parity."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
import torch
from kvpress import KnormPress, SnapKVPress, StreamingLLMPress, TOVAPress
from transformers import pipeline

from kvx.compressors.presets import TOVA, SnapKV, StreamingLLM, ThinK
from kvx.core.records import as_dicts, cell_metrics, validate
from kvx.core.registry import registry
from kvx.modeling.reader import reader_identity
from kvx.pipeline.cell import Cell
from kvx.pipeline.engine import Engine
from kvx.readers.tiny import TinyLlama
from kvx.tasks.ruler import NiahSingle
from kvx.testing.records import unmeasured
from kvx.testing.stages import compress_and_decode

N = 3


def cell(press_name: str, compressor, ratio: float, **kw) -> Cell:
    base = dict(
        task_name="ruler_niah_single",
        task=NiahSingle(),
        reader_name="tiny",
        press_name=press_name,
        compressor=compressor,
        ratio=ratio,
        seed=0,
        n_sources=N,
        context_tokens=400,
        max_new_tokens=6,
    )
    base.update(kw)
    return Cell(**base)


def test_control_and_prefill_run_once_per_source_across_the_grid(tiny, engine):
    for comp in (SnapKV(window_size=16), TOVA()):
        for ratio in (0.25, 0.5):
            records = [
                r.to_dict()
                for r in engine.run_cells([cell(type(comp).__name__, comp, ratio)], tiny, progress=False)[0]
            ]
            assert [r["status"] for r in records] == ["supported"] * N
    assert engine.controls.computed == N
    assert engine.prefills == N  # the captured prefill served every fast-path cell


def test_controls_are_reused_by_a_later_process(tiny, tmp_path):
    first = Engine(tmp_path, 2**28)
    a = as_dicts(first.run_cells([cell("tova", TOVA(), 0.5)], tiny, progress=False)[0])
    second = Engine(tmp_path, 2**28)
    b = as_dicts(second.run_cells([cell("tova", TOVA(), 0.25)], tiny, progress=False)[0])
    assert first.controls.computed == N and second.controls.computed == 0 and second.controls.loaded == N
    assert [r["full"] for r in a] == [r["full"] for r in b]


def test_records_follow_the_schema_and_pair_transitions(tiny, engine):
    records = as_dicts(engine.run_cells([cell("tova", TOVA(), 0.5)], tiny, progress=False)[0])
    for r in records:
        validate(r)
        expected = f"{'C' if r['full']['correct'] else 'W'}→{'C' if r['compressed']['correct'] else 'W'}"
        assert r["transition"] == expected
        assert r["setting"]["method_parameter"]["kept_tokens_per_head"] == int(r["n_context_tokens"] * 0.5)
        assert len(r["prompt_hash"]) == 64 and r["key"].endswith(f"/tova/ratio=0.5/seed=0/{r['cell']['id']}")
        assert r["setting"]["kind"] == "ratio" and r["setting"]["value"] == 0.5


@dataclass
class FailsOnSecondSource(TOVA):
    calls: int = 0

    def compress_captured(self, model, capture, ratio):
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("boom on purpose")
        return super().compress_captured(model, capture, ratio)


def test_an_exception_on_one_source_is_an_error_record_not_a_wrong_answer(tiny, engine):
    records = as_dicts(engine.run_cells([cell("fails", FailsOnSecondSource(), 0.5)], tiny, progress=False)[0])
    assert [r["status"] for r in records] == ["supported", "error", "supported"]
    assert records[1]["reason"] == "RuntimeError: boom on purpose"
    assert records[1]["compressed"] is None and records[1]["transition"] is None
    m = cell_metrics(records)
    assert m["n_error"] == 1 and m["n_supported"] == 2
    assert m["n_cc"] + m["n_cw"] + m["n_wc"] + m["n_ww"] == 2


def test_unsupported_setting_runs_nothing(tiny, engine):
    records = as_dicts(engine.run_cells([cell("think", ThinK(), 0.75)], tiny, progress=False)[0])
    assert all(r["status"] == "unsupported" and "key channels" in r["reason"] for r in records)
    assert all(r["full"] is None and r["compressed"] is None for r in records)
    assert engine.prefills == 0 and engine.controls.computed == 0
    assert cell_metrics(records)["n_unsupported"] == N


def test_uneven_layer_lengths_decode_on_per_layer_attention(tiny, engine):
    """PyramidKV leaves each layer a different length; transformers' shared mask cannot serve them."""
    pyramid = registry("compressor").get("pyramidkv")(window_size=8)
    records = as_dicts(engine.run_cells([cell("pyramidkv", pyramid, 0.5)], tiny, progress=False)[0])
    budgets = records[0]["setting"]["method_parameter"]["kept_tokens_per_layer"]
    assert len(set(budgets)) > 1
    assert [r["status"] for r in records] == ["supported"] * N, [r["reason"] for r in records]


def test_no_compression_cell_is_the_control(tiny, engine):
    none = registry("compressor").get("none")()
    measured = as_dicts(engine.run_cells([cell("none", none, 0.0)], tiny, progress=False)[0])
    records = [unmeasured(r) for r in measured]
    assert all(r["full"] == r["compressed"] for r in records)
    assert all(r["full"]["cost"]["kv_bytes"] == r["compressed"]["cost"]["kv_bytes"] for r in measured)
    assert {r["transition"] for r in records} <= {"C→C", "W→W"}


def test_query_aware_mode_compresses_with_the_question(tiny, engine):
    records = [
        r.to_dict()
        for r in engine.run_cells(
            [cell("snapkv", SnapKV(window_size=8), 0.5, query_aware=True)], tiny, progress=False
        )[0]
    ]
    assert all(r["status"] == "supported" and r["query_aware"] for r in records)


#: kvx's compressor and the kvpress press it must answer like, at ratio 0.5
PRESSES = pytest.mark.parametrize(
    ("comp", "press"),
    [
        (registry("compressor").get("none")(), None),
        (SnapKV(window_size=16), SnapKVPress(compression_ratio=0.5, window_size=16)),
        (TOVA(), TOVAPress(compression_ratio=0.5)),
        (StreamingLLM(), StreamingLLMPress(compression_ratio=0.5)),
        (registry("compressor").get("knorm")(), KnormPress(compression_ratio=0.5)),
    ],
    ids=["none", "snapkv", "tova", "streaming_llm", "knorm"],
)


@PRESSES
def test_answers_match_kvpress_pipeline_token_for_token(tiny, engine, comp, press):
    pipe = pipeline("kv-press-text-generation", model=tiny.model, tokenizer=tiny.tokenizer, device="cpu")
    c = cell("x", comp, 0.5, max_new_tokens=12)
    for source in engine.sources(c, tiny):
        prompt = tiny.encode(source.context, source.question, source.answer_prefix)
        ids = pipe.preprocess(
            source.context, [source.question], source.answer_prefix, max_context_length=10**9
        )
        assert torch.equal(ids["context_ids"], prompt.context_ids)
        assert torch.equal(ids["questions_ids"][0], prompt.question_ids)
        expected = pipe(
            source.context,
            question=source.question,
            answer_prefix=source.answer_prefix,
            press=press,
            max_new_tokens=12,
        )["answer"]
        with torch.inference_mode():
            got = compress_and_decode(engine, c, tiny, prompt)[0].text
        assert got == expected


@PRESSES
@pytest.mark.parametrize("cut", [None, 5], ids=["whole", "context_cut"])
def test_question_mode_answers_match_kvpress_query_aware_evaluation(tiny, tmp_path, comp, press, cut):
    """kvpress's query-aware evaluation runs its pipeline on context + question with question "":
    every answer of ``query_aware=question`` (decoded in the source's batch) is that answer, with
    ``truncation=context`` too, where kvpress's ``max_context_length`` cuts the question's end."""
    pipe = pipeline("kv-press-text-generation", model=tiny.model, tokenizer=tiny.tokenizer, device="cpu")
    c = cell("x", comp, 0.5, max_new_tokens=12, query_aware="question")
    sources = Engine(tmp_path / "sources", 2**28).sources(c, tiny)
    reader, limit = tiny, None
    if cut is not None:  # the session's weights under kvpress's truncation, as load_reader would give them
        limit = min(tiny.render(s, joined=True).context_ids.shape[1] for s in sources) - cut
        cut_reader = TinyLlama(num_hidden_layers=3, max_prompt_tokens=limit, truncation="context")
        identity = reader_identity("tiny", cut_reader)
        reader = dataclasses.replace(tiny, identity=identity, max_prompt_tokens=limit, truncation="context")
    engine = Engine(tmp_path / "outputs", 2**28)
    records = as_dicts(engine.run_cells([c], reader, progress=False)[0])
    for source, record in zip(sources, records):
        joined = reader.render(source, joined=True)
        ids = pipe.preprocess(
            source.context + source.question, [""], source.answer_prefix, max_context_length=limit or 10**9
        )
        assert torch.equal(ids["context_ids"], joined.context_ids)
        assert torch.equal(ids["questions_ids"][0], joined.question_ids)
        expected = pipe(
            source.context + source.question,
            question="",
            answer_prefix=source.answer_prefix,
            press=press,
            max_new_tokens=12,
            max_context_length=limit,
        )["answer"]
        assert record["status"] == "supported" and record["compressed"]["output"] == expected
        if cut is not None:
            assert record["truncation"]["mode"] == "context"
            assert record["truncation"]["compressed_context_tokens_cut"] >= cut


@dataclass
class SharedCatalog(NiahSingle):
    """Every source asks a different question about ONE context (a tool catalog's shape)."""

    def sources(self, n, seed, context_tokens, count_tokens):
        base = super().sources(1, seed, context_tokens, count_tokens)[0]
        return [
            type(base)(f"shared_{i}", base.context, f"{base.question} ({i})", base.answers, base.evidence)
            for i in range(n)
        ]


@pytest.mark.parametrize("name", ["snapkv", "tova", "streaming_llm"])
def test_a_shared_context_is_compressed_once_and_decodes_as_if_compressed_per_source(
    tiny, tmp_path, monkeypatch, name
):
    import kvx.modeling.compressed as compressed_module

    comp = registry("compressor").get(name)(**({"window_size": 16} if name == "snapkv" else {}))
    c = cell(name, comp, 0.5, task=SharedCatalog(), n_sources=4)
    shared = Engine(tmp_path / "a", 2**28)
    records = as_dicts(shared.run_cells([c], tiny, progress=False)[0])
    assert shared.prefills == 1 and shared.compressions == 1  # one catalog: one prefill, one compression
    monkeypatch.setattr(compressed_module, "SHARED_CONTEXTS_KEPT", 0)  # the same run, compressing per source
    alone = Engine(tmp_path / "b", 2**28)
    again = as_dicts(alone.run_cells([c], tiny, progress=False)[0])
    assert alone.compressions == 4
    assert [r["compressed"]["token_ids"] for r in records] == [r["compressed"]["token_ids"] for r in again]
    assert [r["status"] for r in records] == ["supported"] * 4


@dataclass
class TwoCatalogs(NiahSingle):
    """Half the sources ask about one context, then half about another (a BFCL split's two shards)."""

    def sources(self, n, seed, context_tokens, count_tokens):
        bases = super().sources(2, seed, context_tokens, count_tokens)
        return [
            type(base)(f"shard{j}_{i}", base.context, f"{base.question} ({i})", base.answers, base.evidence)
            for j, base in enumerate(bases)
            for i in range(n // 2)
        ]


def test_each_shared_context_of_a_split_is_compressed_once(tiny, tmp_path):
    c = cell("tova", TOVA(), 0.5, task=TwoCatalogs(), n_sources=4)
    engine = Engine(tmp_path, 2**28)
    (records,) = engine.run_cells([c], tiny, progress=False, release=True)  # as a sweep of many cells
    assert len({s.context for s in engine.sources(c, tiny)}) == 2
    assert engine.compressions == 2  # one per context (the control prefills per source when releasing)
    assert not engine.shared_contexts  # the last source of each context let its compression go
    assert [r["status"] for r in as_dicts(records)] == ["supported"] * 4


@pytest.mark.parametrize("mode", ["prompt", "question"])
def test_query_aware_compression_is_never_shared(tiny, engine, mode):
    c = cell("snapkv", SnapKV(window_size=16), 0.5, task=SharedCatalog(), n_sources=3, query_aware=mode)
    as_dicts(engine.run_cells([c], tiny, progress=False)[0])
    assert engine.compressions == 3 and not engine.shared_contexts
