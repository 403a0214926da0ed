"""Diagnostics on real runs of the tiny model: maps, alignment, coverage states, likelihood, records."""

from __future__ import annotations

import math

import pytest
import torch

from kvx.compressors.wrappers import match_rows
from kvx.core.records import as_dicts, validate
from kvx.core.registry import registry
from kvx.diagnostics.alignment import align_evidence
from kvx.modeling import attention
from kvx.modeling.capture import capture_prefill
from kvx.pipeline.cell import Cell
from kvx.tasks.base import Score
from kvx.tasks.ruler import NiahSingle
from kvx.testing.stages import compress_and_decode

DIAGS = [(n, registry("diagnostic").get(n)()) for n in ("coverage", "likelihood", "decoding")]


def cell(name: str, ratio: float, **press) -> Cell:
    comp = registry("compressor").get(name)(**press)
    return Cell("ruler_niah_single", NiahSingle(), "tiny", name, comp, ratio, 0, 2, 400, 6, diagnostics=DIAGS)


@pytest.fixture(scope="module")
def prompt(tiny):
    return tiny.encode("The grass is green. The sky is blue. " * 12, "What colour is the sky?", "It is")


def compress(tiny, prompt, name: str, ratio: float = 0.5, **press):
    """Compress on a fresh capture; returns (capture, cache, retained map)."""
    comp = registry("compressor").get(name)(**press)
    cap = capture_prefill(tiny.model, prompt.context_ids)
    with torch.inference_mode():
        cache = comp.compress_captured(tiny.model, cap, ratio)
    return cap, cache, comp.retained_map(tiny.model, cache, cap, ratio)


@pytest.mark.parametrize(
    ("name", "press"), [("snapkv", {"window_size": 8}), ("tova", {}), ("streaming_llm", {})]
)
def test_measured_map_is_exactly_the_positions_whose_keys_survive(tiny, prompt, name, press):
    cap, cache, retained = compress(tiny, prompt, name, **press)
    assert retained.status == "measured"
    heads = cache.layers[0].keys.shape[1]
    for layer in range(len(cache.layers)):
        for head in range(heads):
            survived = torch.zeros(cap.n_tokens, dtype=torch.bool)
            survived[match_rows(cache.layers[layer].keys[0, head], cap.layers[layer].keys[0, head])] = True
            assert torch.equal(retained.mask[layer * heads + head], survived)


def test_streaming_llm_map_is_sinks_plus_recent_window(tiny, prompt):
    cap, _, retained = compress(tiny, prompt, "streaming_llm")
    mask = retained.mask
    n, kept = cap.n_tokens, int(cap.n_tokens * 0.5)
    expected = torch.zeros(n, dtype=torch.bool)
    expected[:4] = True
    expected[n - (kept - 4) :] = True
    assert all(torch.equal(row, expected) for row in mask)


def test_adakv_keeps_head_slots_apart(tiny, prompt):
    cap, cache, retained = compress(
        tiny, prompt, "adakv", base=registry("compressor").get("snapkv")(window_size=8)
    )
    heads = cache.layers[0].keys.shape[1]
    per_layer = retained.mask.view(len(cache.layers), heads, -1)
    n = cap.n_tokens
    assert retained.status == "measured"
    assert all(int(layer.sum()) == heads * int(n * 0.5) for layer in per_layer)  # budget shared by heads
    assert any(not torch.equal(layer[0], layer[1]) for layer in per_layer)  # but not the same positions


def test_chunkkv_map_is_projected_whole_chunks(tiny, prompt):
    cap, _, retained = compress(tiny, prompt, "chunkkv", chunk_length=10)
    assert retained.status == "projected"
    row = retained.mask[0]
    full_chunks = row[: (cap.n_tokens // 10) * 10].view(-1, 10)
    assert all(bool(c.all()) or not bool(c.any()) for c in full_chunks)


@pytest.mark.parametrize(("name", "press"), [("think", {}), ("hqq", {"group_size": 16})])
def test_structural_methods_report_addressability_without_coverage(tiny, engine, name, press):
    # HQQ groups must divide the tensor size; the tiny model's head_dim is 16
    records = as_dicts(engine.run_cells([cell(name, 0.25, **press)], tiny, progress=False)[0])
    for r in records:
        cov = r["diagnostics"]["coverage"]
        assert cov["status"] == "structural" and cov["values"] == {} and cov["reason"]
        assert r["diagnostics"]["likelihood"]["status"] == "measured"


def test_evidence_alignment_maps_needles_to_their_tokens(tiny, engine):
    c = cell("tova", 0.5)
    for source in engine.sources(c, tiny):
        prompt = tiny.encode(source.context, source.question, source.answer_prefix)
        alignment = align_evidence(tiny.tokenizer, prompt, list(source.evidence))
        assert alignment.ok
        for (start, end), positions in zip(source.evidence, alignment.spans):
            text = tiny.tokenizer.decode(prompt.context_ids[0, sorted(positions)])
            assert source.context[start:end] in text


def test_identical_caches_give_zero_drift(tiny, engine):
    records = as_dicts(engine.run_cells([cell("none", 0.0)], tiny, progress=False)[0])
    for r in records:
        lik = r["diagnostics"]["likelihood"]["values"]
        assert lik["delta_nll"] == pytest.approx(0.0, abs=1e-9) and lik["kl"] == pytest.approx(0.0, abs=1e-9)
        p = math.exp(-lik["nll_full"])  # GPR = p / (p + eps): ≈ 1, short of it by eps
        assert lik["top50"] == 1.0 and lik["gpr"] == pytest.approx(p / (p + 1e-6), rel=1e-12)
        assert lik["rank_shift_first"] == 0 and lik["rank_shift_mean"] == 0
        cov = r["diagnostics"]["coverage"]
        assert cov["status"] == "measured" and cov["values"]["err"] == 1.0 and cov["values"]["ecov"] == 1.0


def test_every_supported_record_carries_all_selected_diagnostics(tiny, engine):
    records = as_dicts(engine.run_cells([cell("snapkv", 0.75, window_size=8)], tiny, progress=False)[0])
    for r in records:
        validate(r)
        assert set(r["diagnostics"]) == {"coverage", "likelihood", "decoding"}
        assert all(d["seconds"] >= 0 for d in r["diagnostics"].values())
        dec = r["diagnostics"]["decoding"]["values"]
        assert dec["compressed_evaluated_tokens"] == len(r["compressed"]["token_ids"])
        assert "gold_rank_comp_first" in dec
        assert ("category" in r) == (r["transition"] == "C→W")


def test_a_failing_diagnostic_is_an_error_result_not_a_lost_record(tiny, engine):
    class Broken:
        def measure(self, context):
            raise RuntimeError("diagnostic bug")

    c = cell("tova", 0.5)
    c.diagnostics = [("broken", Broken())]
    records = as_dicts(engine.run_cells([c], tiny, progress=False)[0])
    for r in records:
        assert r["status"] == "supported"
        assert r["diagnostics"]["broken"]["status"] == "error"
        assert r["diagnostics"]["broken"]["reason"] == "RuntimeError: diagnostic bug"


def test_hqq_likelihood_reuses_the_decoding_cache_exactly(tiny, engine):
    """Cutting HQQ's residual back must give what a rebuilt cache gives (no re-quantization)."""
    from kvx.diagnostics.likelihood import question_then_reference, reference_logits

    comp = registry("compressor").get("hqq")(group_size=16)
    c = cell("hqq", 0.5, group_size=16)
    source = engine.sources(c, tiny)[1]
    # a short question: the byte tokenizer's long ones overflow HQQ's 128-token residual
    prompt = tiny.encode(source.context, "Number?", "")
    ref = tiny.tokenizer.encode(" 42", add_special_tokens=False, return_tensors="pt")
    c.compressor = comp
    with torch.inference_mode():
        _, run = compress_and_decode(engine, c, tiny, prompt)
        cut = run.cache_after_feed()
        assert cut is not None
        reused = reference_logits(tiny.model, cut, run.first_logits, ref, run.start + run.feed.shape[1])
        rebuilt = question_then_reference(tiny.model, run.fresh_cache(), run.feed, ref, run.start)
    assert torch.allclose(reused, rebuilt, atol=1e-5)


ATTENTION = [(n, registry("diagnostic").get(n)()) for n in ("attention",)]


def test_identical_caches_give_ear_one(tiny, engine):
    c = cell("none", 0.0)
    c.diagnostics = ATTENTION
    for r in as_dicts(engine.run_cells([c], tiny, progress=False)[0]):
        att = r["diagnostics"]["attention"]
        assert att["status"] == "measured", att["reason"]
        assert att["values"]["ear"] == pytest.approx(1.0, abs=1e-6)
        assert att["values"]["eam_comp"] == pytest.approx(att["values"]["eam_full"], abs=1e-7)


@pytest.mark.parametrize(
    ("name", "press"), [("snapkv", {"window_size": 8}), ("pyramidkv", {"window_size": 8})]
)
def test_attention_replay_on_evicted_caches(tiny, engine, name, press):
    c = cell(name, 0.5, **press)
    c.diagnostics = [*DIAGS[:1], *ATTENTION]
    for r in as_dicts(engine.run_cells([c], tiny, progress=False)[0]):
        values = r["diagnostics"]["attention"]["values"]
        share = r["diagnostics"]["coverage"]["values"]["evidence_share"]  # |E| / n, from coverage
        assert r["diagnostics"]["attention"]["status"] == "measured"
        assert 0.0 <= values["eam_comp"] <= 1.0 and values["ear"] >= 0.0
        assert values["ear"] == pytest.approx(values["eam_comp"] / values["eam_full"])
        assert values["neae_comp"] == pytest.approx(values["eam_comp"] / share)


def test_adakv_head_masks_never_reach_the_fullcache_side(tiny, engine, prompt):
    """AdaKV leaves masked key indices on the attention modules; FullCache work must clear them.
    (AdaKV itself cannot decode on random weights, so the masks are planted by hand.)"""
    from kvx.diagnostics.context import DiagnosticContext
    from kvx.modeling.layers import attention_layers

    c = cell("tova", 0.5)
    with torch.inference_mode():
        _, run = compress_and_decode(engine, c, tiny, prompt)
    planted = (torch.tensor([0]), torch.tensor([0]), torch.tensor([3]))
    for module in attention_layers(tiny.model):
        module.masked_key_indices = planted
    source = engine.sources(c, tiny)[0]
    DiagnosticContext(tiny, source, prompt, run, {}, c.max_new_tokens, lambda _: True).full_cache()
    assert all(m.masked_key_indices is None for m in attention_layers(tiny.model))


def test_intervention_with_no_boost_reproduces_the_unmodified_output(tiny, engine):
    from kvx.diagnostics.intervention import Intervention

    class AlwaysRight(NiahSingle):
        """Every answer scores 1, so random-weight runs are C→C rows the intervention applies to."""

        def evaluate(self, answer, source):
            return Score.of(1.0, answer)

    c = cell("think", 0.25)  # structural: every position stays addressable in place
    c.task = AlwaysRight()
    # log(1) = 0 added to the logits; every C→C row, not only the low-EAR cohort's controls
    c.diagnostics = [("intervention", Intervention(boost=1.0, cohort="all"))]
    records = as_dicts(engine.run_cells([c], tiny, progress=False)[0])
    assert [r["transition"] for r in records] == ["C→C", "C→C"]
    for r in records:
        result = r["diagnostics"]["intervention"]
        assert result["status"] == "structural", result["reason"]
        v = result["values"]
        assert v["baseline_output"] == v["evidence_output"] == v["sham_output"] == r["compressed"]["output"]
        assert v["degraded_evidence"] is False and v["boosted_rows"] > 0


def test_the_intervention_runs_on_the_c_to_c_rows_with_the_cohorts_signature_only(tiny, engine):
    """The cohort is read from the record's earlier results: stand-ins for likelihood and attention
    give ThinK's structural C→C rows the low-EAR-only signature (EAR 0.2) or none (EAR 0.9)."""
    from kvx.diagnostics.base import Diagnostic, DiagnosticResult
    from kvx.diagnostics.cache_coverage import Coverage
    from kvx.diagnostics.intervention import Intervention

    class Stored(Diagnostic):
        def __init__(self, **values):
            self.values = values

        def measure(self, context):
            return DiagnosticResult("measured", dict(self.values))

    class AlwaysRight(NiahSingle):
        def evaluate(self, answer, source):
            return Score.of(1.0, answer)

    for ear, expected in ((0.2, "structural"), (0.9, "not_applicable")):
        c = cell("think", 0.25)
        c.task = AlwaysRight()
        c.diagnostics = [
            ("coverage", Coverage()),
            ("likelihood", Stored(delta_nll=0.5, top50=0.8)),
            ("attention", Stored(ear=ear)),
            ("intervention", Intervention(boost=1.0)),
        ]
        for r in as_dicts(engine.run_cells([c], tiny, progress=False)[0]):
            result = r["diagnostics"]["intervention"]
            assert r["transition"] == "C→C" and result["status"] == expected, result["reason"]
            if expected == "structural":
                values = result["values"]
                assert values["cohort"] == "low_ear" and values["degraded_evidence"] is False
            else:
                assert "rules matched: none" in result["reason"]


def test_intervention_skips_rows_that_are_not_paired_failures_or_controls(tiny, engine):
    from kvx.diagnostics.intervention import Intervention

    c = cell("tova", 0.5)  # random weights: every FullCache answer is wrong (W→*)
    c.diagnostics = [("intervention", Intervention(cohort="all"))]
    for r in as_dicts(engine.run_cells([c], tiny, progress=False)[0]):
        assert r["transition"].startswith("W")
        assert r["diagnostics"]["intervention"]["status"] == "not_applicable"


def test_a_cell_built_in_code_with_the_cohorts_inputs_missing_is_refused_before_it_runs(tiny, engine):
    from kvx.core.errors import ConfigError
    from kvx.diagnostics.intervention import Intervention

    c = cell("tova", 0.5)
    likelihood = registry("diagnostic").get("likelihood")()
    c.diagnostics = [("likelihood", likelihood), ("intervention", Intervention())]
    with pytest.raises(ConfigError, match=r"missing before it: coverage, attention"):
        engine.run_cells([c], tiny, progress=False)


def test_intervention_boost_changes_attention_and_sham_is_count_matched():
    from kvx.diagnostics.intervention import sham_rows

    evidence = torch.tensor(
        [[True, True, False, False, False, False], [False, False, False, True, False, False]]
    )
    sham = sham_rows(evidence)
    assert sham.sum(-1).tolist() == [2, 1]
    assert not bool((sham & evidence).any())
    assert torch.equal(sham, sham_rows(evidence))  # deterministic


def test_log4_logit_boost_multiplies_the_odds_of_boosted_keys_by_four():
    from types import SimpleNamespace

    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 1, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    module = SimpleNamespace(kvx_logit_bias=None)
    _, plain = attention.per_layer_causal_eager(module, q, k, v, None)
    module.kvx_logit_bias = torch.zeros(2, 6)
    module.kvx_logit_bias[:, 0] = math.log(4)
    _, boosted = attention.per_layer_causal_eager(module, q, k, v, None)
    ratio = (boosted[..., 0] / boosted[..., 1]) / (plain[..., 0] / plain[..., 1])
    assert torch.allclose(ratio, torch.full_like(ratio, 4.0), rtol=1e-5)
