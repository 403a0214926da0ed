"""Compressors: the fast path reproduces the hook path exactly; settings mean what they say."""

from __future__ import annotations

import pytest
import torch

from kvx.compressors.base import check_ratio
from kvx.core.errors import ConfigError
from kvx.core.records import as_dicts
from kvx.core.registry import registry
from kvx.core.setting import n_kept
from kvx.modeling import attention
from kvx.modeling.capture import capture_prefill
from kvx.modeling.layers import attention_layers
from kvx.modeling.reader import attn_implementation

BUILTIN = [e.name for e in registry("compressor").entries if e.dist == "kvx"]
FAST = [n for n in BUILTIN if registry("compressor").get(n)().fast_path]
HOOK_ONLY = sorted(set(BUILTIN) - set(FAST))


def _layer_tensors(cache, idx):
    layer = cache.layers[idx]
    if hasattr(layer, "_quantized_keys"):
        return layer._dequantize(layer._quantized_keys), layer._dequantize(layer._quantized_values)
    return layer.keys, layer.values


@pytest.fixture(scope="module")
def prompt(tiny):
    return tiny.encode("The grass is green. The sky is blue. " * 12, "What colour is the sky?", "It is")


def test_hook_only_presses_are_the_ones_that_change_the_forward_or_draw_randomly():
    """Random draws, attention weights, their own forward (KVzip's reconstruction, KVCompose's 2x
    cache), a forward hook that is the press (per-layer ratios, DMS, SimLayerKV), or a stack."""
    assert HOOK_ONLY == [
        "compactor",
        "composed",
        "dms",
        "kvcompose",
        "kvgrad",
        "kvzip",
        "leverage",
        "observed_attention",
        "per_layer",
        "random",
        "simlayerkv",
    ]


@pytest.mark.parametrize("name", ["compactor", "leverage", "observed_attention", "random"])
def test_hook_only_presses_compress_through_the_hook(tiny, prompt, name):
    comp = registry("compressor").get(name)()
    n = prompt.context_ids.shape[1]
    with torch.inference_mode(), attn_implementation(tiny.model, comp.attn_implementation):
        cache = comp.prefill(tiny.model, prompt.context_ids, 0.5)
    assert cache.layers[0].keys.shape[2] == n_kept(n, 0.5)


#: fields the tiny reader needs (its 2 KV heads x 16 dims per token take HQQ groups of 32, not 64)
TINY_FIELDS = {"quantized": {"group_size": 32}}


@pytest.mark.parametrize("name", FAST)
def test_fast_path_equals_hook_path(tiny, prompt, name):
    comp = registry("compressor").get(name)(**TINY_FIELDS.get(name, {}))
    model = tiny.model
    with torch.inference_mode(), attn_implementation(model, comp.attn_implementation):
        hook = comp.prefill(model, prompt.context_ids, 0.5)
        hook_masks = [getattr(m, "masked_key_indices", None) for m in attention_layers(model)]
        fast = comp.compress_captured(model, capture_prefill(model, prompt.context_ids), 0.5)
        fast_masks = [getattr(m, "masked_key_indices", None) for m in attention_layers(model)]
    for idx in range(len(hook.layers)):
        hk, hv = _layer_tensors(hook, idx)
        fk, fv = _layer_tensors(fast, idx)
        assert torch.equal(hk, fk) and torch.equal(hv, fv), f"{name}: layer {idx} differs"
    for hm, fm in zip(hook_masks, fast_masks):
        assert (hm is None) == (fm is None)
        if hm is not None:
            assert all(torch.equal(a, b) for a, b in zip(hm, fm))


def _kept_positions(kept_keys: torch.Tensor, full_keys: torch.Tensor, head: int) -> set[int]:
    """Original positions of kept rows (kvpress stores them in score order, not position order)."""
    match = (kept_keys[0, head][:, None, :] == full_keys[0, head][None, :, :]).all(-1)
    assert bool(match.any(-1).all())
    return set(match.float().argmax(-1).tolist())


def test_streaming_llm_keeps_sinks_and_recent_window(tiny, prompt):
    comp = registry("compressor").get("streaming_llm")()
    cap = capture_prefill(tiny.model, prompt.context_ids)
    with torch.inference_mode():
        cache = comp.compress_captured(tiny.model, cap, 0.5)
    n = cap.n_tokens
    kept = n_kept(n, 0.5)
    expected = set(range(4)) | set(range(n - (kept - 4), n))
    for head in range(cache.layers[0].keys.shape[1]):
        assert _kept_positions(cache.layers[0].keys, cap.layers[0].keys, head) == expected


def test_fast_path_leaves_the_capture_untouched(tiny, prompt):
    """ThinK zeroes key channels in place: the captured keys must survive for the next cell."""
    cap = capture_prefill(tiny.model, prompt.context_ids)
    before = cap.layers[0].keys.clone()
    with torch.inference_mode():
        registry("compressor").get("think")().compress_captured(tiny.model, cap, 0.5)
    assert torch.equal(cap.layers[0].keys, before)


def test_think_ratio_above_half_is_unsupported(tiny):
    think = registry("compressor").get("think")()
    s = think.setting(0.75, 100, tiny.model)
    assert not s.supported and "key channels" in s.reason
    ok = think.setting(0.25, 100, tiny.model)
    head_dim = attention_layers(tiny.model)[0].head_dim
    assert ok.supported and ok.method_parameter["key_channel_compression_ratio"] == 0.5
    assert ok.method_parameter["key_channels_kept"] == head_dim - int(head_dim * 0.5)


def test_scorer_setting_reports_kept_tokens(tiny):
    s = registry("compressor").get("tova")().setting(0.25, 1000, tiny.model)
    assert s.method_parameter["kept_tokens_per_head"] == 750 and s.retained_share == 0.75


def test_pyramidkv_layer_budgets_shrink_and_decode_on_cpu(tiny, prompt):
    from kvx.modeling.generation import greedy_decode

    comp = registry("compressor").get("pyramidkv")(window_size=8)
    s = comp.setting(0.5, prompt.context_ids.shape[1], tiny.model)
    budgets = s.method_parameter["kept_tokens_per_layer"]
    assert budgets == sorted(budgets, reverse=True) and budgets[0] > budgets[-1]
    with torch.inference_mode():
        cache = comp.prefill(tiny.model, prompt.context_ids, 0.5)
    assert [cache.layers[i].keys.shape[2] for i in range(len(budgets))] == budgets
    with torch.inference_mode(), attn_implementation(tiny.model, attention.register()):
        gen = greedy_decode(
            tiny.model, tiny.tokenizer, cache, prompt.question_ids, prompt.context_ids.shape[1], 4
        )
    assert len(gen.token_ids) >= 1


@pytest.mark.parametrize("impl", [attention.NAME, attention.EAGER])
def test_per_layer_causal_attention_matches_sdpa_for_uniform_caches(tiny, prompt, impl):
    """kvx's SDPA (uneven caches) and eager (replays, interventions) decode like transformers' SDPA."""
    from kvx.modeling.generation import greedy_decode

    attention.register()
    outs = []
    for name in ("sdpa", impl):
        with torch.inference_mode(), attn_implementation(tiny.model, name):
            cache = capture_prefill(tiny.model, prompt.context_ids).full_cache()
            outs.append(
                greedy_decode(
                    tiny.model, tiny.tokenizer, cache, prompt.question_ids, cache.get_seq_length(), 6
                )
            )
    assert outs[0].token_ids == outs[1].token_ids


@pytest.mark.parametrize(("ratio", "bits"), [(0.25, 8), (0.5, 4), (0.75, 2)])
def test_hqq_maps_paper_labels_to_bits(tiny, ratio, bits):
    s = registry("compressor").get("hqq")(group_size=16).setting(ratio, 500, tiny.model)
    assert s.method_parameter["bits"] == bits and s.retained_share == bits / 16


def test_hqq_rejects_other_bits_and_ratios(tiny):
    hqq = registry("compressor").get("hqq")
    with pytest.raises(ConfigError, match="bits=3"):
        hqq(bits=3).validate()
    s = hqq().setting(0.3, 500, tiny.model)
    assert not s.supported and "ratio=0.3" in s.reason


def _quantizes(comp, model, n: int) -> bool:
    """Whether HQQ takes (and gives back) an n-token layer of keys and values of this model."""
    module = attention_layers(model)[0]
    keys = torch.randn(1, module.config.num_key_value_heads, n, module.head_dim)
    cache = comp._cache(model, 0.0)
    try:
        cache.update(keys, keys.clone(), 0)
        return _layer_tensors(cache, 0)[0].shape == keys.shape
    except Exception:  # HQQ's assert on whole groups, or its bit packing's shape mismatch
        return False


@pytest.mark.parametrize("axes", [(0, 0), (1, 1), (0, 1)])
def test_hqq_is_unsupported_exactly_when_its_groups_do_not_fit_the_readers_cache(tiny, axes):
    """The rule decided before compute is HQQ's own: supported group sizes quantize every length,
    the others fail on some (a single token already: its elements must be whole packed groups)."""
    hqq = registry("compressor").get("hqq")
    for bits in (2, 4, 8):
        for group in range(1, 70):
            comp = hqq(bits=bits, group_size=group, axis_key=axes[0], axis_value=axes[1])
            supported = comp.setting(0.0, 500, tiny.model).supported
            assert supported == all(_quantizes(comp, tiny.model, n) for n in range(1, 9)), (bits, group)


def test_hqq_group_size_the_tiny_cache_cannot_take_is_unsupported_with_what_would_work(tiny, engine):
    """The tiny reader adds 2 KV heads x head_dim 16 = 32 elements per token and layer: group 64
    fits only even lengths, so it is unsupported on every source (never an error on the odd ones);
    group 16 really runs."""
    hqq = registry("compressor").get("hqq")
    cells = [_cell(hqq(bits=4, group_size=g), "hqq") for g in (64, 16)]
    wide, narrow = (as_dicts(records) for records in engine.run_cells(cells, tiny, False))
    assert {r["n_context_tokens"] % 2 for r in wide} == {0, 1}  # both parities, or this shows nothing
    reason = (
        "press.group_size=64 does not split the 32 key/value elements one token adds to a layer "
        "(2 KV heads x head_dim 16) into whole 4-bit HQQ groups, so some context lengths would fail; "
        "group sizes that work for this reader: 2, 4, 8, 16, 32"
    )
    assert [(r["status"], r["reason"]) for r in wide] == [("unsupported", reason)] * len(wide)
    assert [r["status"] for r in narrow] == ["supported"] * len(narrow)


def _cell(comp, name: str):
    from kvx.pipeline.cell import Cell
    from kvx.tasks.ruler import NiahSingle

    return Cell("ruler_niah_single", NiahSingle(), "tiny", name, comp, 0.5, 0, 4, 400, 6)


@pytest.mark.parametrize("bad", [1.0, -0.1, "abc", True])
def test_bad_ratio_names_the_value(bad):
    with pytest.raises(ConfigError, match="ratio"):
        check_ratio(bad)


def test_generated_catalog_fields_are_overridable():
    cls = registry("compressor").get("expected_attention_plain")
    obj = cls(n_sink=8)
    assert obj.build_press(0.5).n_sink == 8 and obj.build_press(0.5).compression_ratio == 0.5


RATIO_FREE = [n for n in FAST if getattr(registry("compressor").get(n)(), "ratio_free_scores", False)]


@pytest.mark.parametrize("name", RATIO_FREE)
def test_a_ratio_free_press_scores_a_capture_once_for_every_ratio(tiny, prompt, name, monkeypatch):
    """Its scores do not depend on the ratio, so the capture's serve every ratio: each ratio's
    cache still equals the hook path's, and each layer is scored once, not once per ratio."""
    comp = registry("compressor").get(name)()
    press_class = type(comp.build_press(0.5))
    original, calls = press_class.score, []

    def counted(self, module, *args, **kwargs):
        calls.append(module.layer_idx)
        return original(self, module, *args, **kwargs)

    model = tiny.model
    cap = capture_prefill(model, prompt.context_ids)
    with torch.inference_mode(), attn_implementation(model, comp.attn_implementation):
        hooks = {r: comp.prefill(model, prompt.context_ids, r) for r in (0.25, 0.5, 0.75)}
        monkeypatch.setattr(press_class, "score", counted)
        fast = {r: comp.compress_captured(model, cap, r) for r in (0.25, 0.5, 0.75)}
    assert sorted(calls) == list(range(len(attention_layers(model))))
    for r in hooks:
        for idx in range(len(hooks[r].layers)):
            assert torch.equal(hooks[r].layers[idx].keys, fast[r].layers[idx].keys), (r, idx)
            assert torch.equal(hooks[r].layers[idx].values, fast[r].layers[idx].values), (r, idx)


def test_ratio_free_scores_are_claimed_only_for_presses_read_to_be():
    assert sorted(RATIO_FREE) == ["keydiff", "knorm", "snapkv", "tova"]
