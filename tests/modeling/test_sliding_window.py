"""Models mixing sliding-window and full-attention layers (Gemma3): only full layers are compressed,
each layer is scored with its own rotary embeddings, and decoding keeps the sliding window."""

from __future__ import annotations

import pytest
import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

from kvx.core.records import as_dicts
from kvx.core.registry import registry
from kvx.core.setting import n_kept
from kvx.modeling import attention
from kvx.modeling.capture import capture_prefill
from kvx.modeling.generation import greedy_decode
from kvx.modeling.reader import LoadedReader, attn_implementation
from kvx.pipeline.cell import Cell
from kvx.pipeline.engine import Engine
from kvx.readers.tiny import byte_tokenizer
from kvx.tasks.ruler import NiahSingle

LAYER_TYPES = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
FULL, SLIDING = [1, 3], [0, 2]
WINDOW = 16
PRESSES = [("snapkv", {"window_size": 8}), ("tova", {}), ("streaming_llm", {}), ("knorm", {})]


@pytest.fixture(scope="module")
def gemma() -> LoadedReader:
    """A random text-only Gemma3: local layers (window 16, theta 1e4) around global ones (theta 1e6)."""
    tok = byte_tokenizer()
    config = Gemma3TextConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=len(LAYER_TYPES),
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        query_pre_attn_scalar=16,
        layer_types=LAYER_TYPES,
        sliding_window=WINDOW,
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
        },
        max_position_embeddings=4096,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(config).eval()
    model.generation_config.eos_token_id = tok.eos_token_id
    return LoadedReader("tiny_gemma3", model, tok, "random-seed-0", None)


@pytest.fixture(scope="module")
def prompt(gemma):
    prompt = gemma.encode("The grass is green. The sky is blue. " * 3, "What colour is the sky?", "It is")
    assert prompt.context_ids.shape[1] > 4 * WINDOW
    return prompt


def compressor(name: str, press: dict):
    return registry("compressor").get(name)(**press)


@pytest.mark.parametrize(("name", "press"), PRESSES, ids=[p[0] for p in PRESSES])
def test_fast_path_equals_hook_path_on_every_layer(gemma, prompt, name, press):
    """Global layers must be scored with their own (theta 1e6) rotary embeddings, not layer 0's."""
    comp, model = compressor(name, press), gemma.model
    with torch.inference_mode():
        hook = comp.prefill(model, prompt.context_ids, 0.5)
        fast = comp.compress_captured(model, capture_prefill(model, prompt.context_ids), 0.5)
    for idx in range(len(LAYER_TYPES)):
        assert torch.equal(hook.layers[idx].keys, fast.layers[idx].keys), f"{name}: keys of layer {idx}"
        assert torch.equal(hook.layers[idx].values, fast.layers[idx].values), f"{name}: values of layer {idx}"


@pytest.mark.parametrize(("name", "press"), PRESSES, ids=[p[0] for p in PRESSES])
def test_only_full_attention_layers_are_compressed(gemma, prompt, name, press):
    comp, model = compressor(name, press), gemma.model
    capture = capture_prefill(model, prompt.context_ids)
    full = capture.full_cache()
    n = capture.n_tokens
    with torch.inference_mode():
        caches = {
            "hook": comp.prefill(model, prompt.context_ids, 0.5),
            "fast": comp.compress_captured(model, capture, 0.5),
        }
    for path, cache in caches.items():
        for idx in SLIDING:
            assert torch.equal(cache.layers[idx].keys, full.layers[idx].keys), f"{path}: layer {idx}"
            assert torch.equal(cache.layers[idx].values, full.layers[idx].values), f"{path}: layer {idx}"
        assert [cache.layers[idx].keys.shape[2] for idx in FULL] == [n_kept(n, 0.5)] * len(FULL)


def test_setting_names_the_compressed_layers_and_counts_whole_layers_as_kept(gemma):
    s = compressor("tova", {}).setting(0.5, 100, gemma.model)
    assert s.method_parameter["compressed_layers"] == FULL
    assert s.retained_share == pytest.approx((0.5 * len(FULL) + len(SLIDING)) / len(LAYER_TYPES))
    budgets = compressor("pyramidkv", {"window_size": 8}).setting(0.5, 100, gemma.model)
    assert len(budgets.method_parameter["kept_tokens_per_layer"]) == len(FULL)


def test_retained_map_keeps_sliding_slots_whole_and_coverage_counts_compressed_slots(gemma, prompt):
    comp, model = compressor("snapkv", {"window_size": 8}), gemma.model
    capture = capture_prefill(model, prompt.context_ids)
    with torch.inference_mode():
        cache = comp.compress_captured(model, capture, 0.5)
    retained = comp.retained_map(model, cache, capture, 0.5)
    heads, n = cache.layers[0].keys.shape[1], capture.n_tokens
    per_layer = retained.mask.view(len(LAYER_TYPES), heads, n)
    assert retained.compressed == [kind == "full_attention" for kind in LAYER_TYPES]
    assert all(bool(per_layer[idx].all()) for idx in SLIDING)
    assert all(int(per_layer[idx].sum()) == heads * n_kept(n, 0.5) for idx in FULL)
    assert torch.equal(retained.compressed_slots(), per_layer[FULL].reshape(len(FULL) * heads, n))


@pytest.mark.parametrize("impl", [attention.NAME, attention.EAGER])
def test_per_layer_attention_honours_the_sliding_window(gemma, prompt, impl):
    """kvx's own attention (uneven caches, replays) must decode a full cache like the model's masks."""
    attention.register()
    model, outs = gemma.model, []
    for name in ("sdpa", impl):
        with torch.inference_mode(), attn_implementation(model, name):
            cache = capture_prefill(model, prompt.context_ids).full_cache()
            gen = greedy_decode(model, gemma.tokenizer, cache, prompt.question_ids, cache.get_seq_length(), 8)
        outs.append(gen)
    assert outs[0].token_ids == outs[1].token_ids
    torch.testing.assert_close(outs[0].first_logits, outs[1].first_logits)


def cell(name: str, press: dict, ratio: float, **kw) -> Cell:
    comp = compressor(name, press)
    return Cell("ruler_niah_single", NiahSingle(), "tiny_gemma3", name, comp, ratio, 0, 2, 400, 8, **kw)


@pytest.mark.parametrize(("name", "press"), PRESSES, ids=[p[0] for p in PRESSES])
def test_no_op_compression_decodes_the_full_cache_answer(gemma, tmp_path, name, press):
    records = as_dicts(Engine(tmp_path, 2**28).run_cells([cell(name, press, 0.0)], gemma, progress=False)[0])
    assert [r["status"] for r in records] == ["supported"] * 2
    assert all(r["compressed"]["token_ids"] == r["full"]["token_ids"] for r in records)


def test_compressed_cell_decodes_and_covers_only_compressed_slots(gemma, tmp_path):
    coverage = [("coverage", registry("diagnostic").get("coverage")())]
    c = cell("snapkv", {"window_size": 8}, 0.5, diagnostics=coverage)
    records = as_dicts(Engine(tmp_path, 2**28).run_cells([c], gemma, progress=False)[0])
    heads = gemma.model.config.num_key_value_heads
    for r in records:
        assert r["status"] == "supported", r["reason"]
        assert r["setting"]["method_parameter"]["compressed_layers"] == FULL
        values = r["diagnostics"]["coverage"]["values"]
        assert values["n_slots"] == len(FULL) * heads and values["n_layers_untouched"] == len(SLIDING)
