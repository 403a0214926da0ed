"""Every press and wrapper kvx exposes answers token for token as kvpress's own pipeline does, on the
same prompt, model and setting (kvpress's ``kv-press-text-generation`` with the press built directly)."""

from __future__ import annotations

import kvpress
import pytest
import torch
from transformers import pipeline

from kvx.core.registry import registry
from kvx.pipeline.cell import Cell
from kvx.tasks.ruler import NiahSingle
from kvx.testing.stages import compress_and_decode


def _kvx(name: str, base: str | None = None, base_fields: dict | None = None, **fields):
    reg = registry("compressor")
    comp = reg.get(name)(**fields)
    if base is not None:
        comp.base = reg.get(base)(**(base_fields or {}))
    comp.validate()
    return comp


CASES = {
    "adakv(tova)": (lambda: _kvx("adakv", "tova"), lambda r: kvpress.AdaKVPress(kvpress.TOVAPress(r))),
    "adakv(keydiff)": (
        lambda: _kvx("adakv", "keydiff"),
        lambda r: kvpress.AdaKVPress(kvpress.KeyDiffPress(r)),
    ),
    "critical(snapkv)": (
        lambda: _kvx("critical", "snapkv", {"window_size": 16}),
        lambda r: _ratio(kvpress.CriticalKVPress(kvpress.SnapKVPress(window_size=16)), r),
    ),
    "critical_adakv(knorm)": (
        lambda: _kvx("critical_adakv", "knorm"),
        lambda r: _ratio(kvpress.CriticalAdaKVPress(kvpress.KnormPress()), r),
    ),
    "chunkkv(snapkv)": (
        lambda: _kvx("chunkkv", "snapkv", {"window_size": 16}),
        lambda r: kvpress.ChunkKVPress(kvpress.SnapKVPress(r, window_size=16), chunk_length=20),
    ),
    "chunk(keydiff)": (
        lambda: _kvx("chunk", "keydiff", chunk_length=64),
        lambda r: kvpress.ChunkPress(kvpress.KeyDiffPress(r), chunk_length=64),
    ),
    "block(keydiff)": (
        lambda: _kvx("block", block_size=16),
        lambda r: kvpress.BlockPress(kvpress.KeyDiffPress(r), block_size=16),
    ),
    "key_rerotation(tova)": (
        lambda: _kvx("key_rerotation", "tova"),
        lambda r: kvpress.KeyRerotationPress(kvpress.TOVAPress(r)),
    ),
    "merging(knorm)": (lambda: _kvx("merging"), lambda r: kvpress.MergingPress(kvpress.KnormPress(r))),
    "entropy_gated_chunkkv(knorm)": (
        lambda: _kvx("entropy_gated_chunkkv", "knorm"),
        lambda r: kvpress.EntropyGatedChunkKVPress(
            kvpress.KnormPress(r), chunk_length=10, low_entropy_chunk_length=4
        ),
    ),
    "per_layer(knorm)": (
        lambda: _kvx("per_layer", compression_ratios=[0.25, 0.5, 0.75]),
        lambda r: kvpress.PerLayerCompressionPress(
            kvpress.KnormPress(), compression_ratios=[0.25, 0.5, 0.75]
        ),
    ),
    "composed(snapkv,think)": (
        lambda: _composed(),
        lambda r: kvpress.ComposedPress(
            [kvpress.SnapKVPress(r, window_size=16), kvpress.ThinKPress(key_channel_compression_ratio=0.5)]
        ),
    ),
    "dms(knorm)": (
        lambda: _kvx("dms", threshold=2.0, sliding_window_size=16),
        lambda r: kvpress.DMSPress(kvpress.KnormPress(), threshold=2.0, sliding_window_size=16),
    ),
    "cap": (lambda: _kvx("cap"), lambda r: kvpress.CapPress(r)),
    "expected_attention_plain": (
        lambda: _kvx("expected_attention_plain"),
        lambda r: kvpress.ExpectedAttentionPress(r),
    ),
    "expected_attention": (
        lambda: _kvx("adakv", "expected_attention_plain", {"epsilon": 1e-2}),
        lambda r: kvpress.AdaKVPress(kvpress.ExpectedAttentionPress(r, epsilon=1e-2)),
    ),
    "kvcompose": (lambda: _kvx("kvcompose"), lambda r: kvpress.KVComposePress(compression_ratio=r)),
    "decoding(knorm)": (
        lambda: _kvx("decoding", **DECODE),
        lambda r: kvpress.DecodingPress(kvpress.KnormPress(), **DECODE),
    ),
    "compression_ratio_decoding(tova)": (
        lambda: _kvx(
            "compression_ratio_decoding", "tova", compression_interval=4, hidden_states_buffer_size=4
        ),
        lambda r: kvpress.CompressionRatioDecodingPress(
            kvpress.TOVAPress(),
            compression_interval=4,
            hidden_states_buffer_size=4,
            target_compression_ratio=r,
        ),
    ),
    "cam(streaming_llm)": (
        lambda: _kvx("cam", "streaming_llm", merge_budget=8, **DECODE),
        lambda r: kvpress.CAMPress(kvpress.StreamingLLMPress(), merge_budget=8, **DECODE),
    ),
    "prefill_decoding(snapkv;knorm)": (
        lambda: _prefill_decoding(),
        lambda r: kvpress.PrefillDecodingPress(
            kvpress.SnapKVPress(r, window_size=16), kvpress.DecodingPress(kvpress.KnormPress(), **DECODE)
        ),
    ),
    "simlayerkv": (
        lambda: _kvx("simlayerkv", lazy_threshold=0.0, n_recent=32),
        lambda r: kvpress.SimLayerKVPress(lazy_threshold=0.0, n_recent=32),
    ),
}


#: kvpress's own pipeline cannot decode these on the CPU test reader (its head-mask patch finds no fake
#: keys for the random-weight model; SDPA refuses layers of different lengths): their caches, as
#: kvpress's hook builds them, are compared with kvx's instead
CACHE_ONLY = {
    "adakv(tova)",
    "adakv(keydiff)",
    "critical_adakv(knorm)",
    "dms(knorm)",
    "expected_attention",
    "kvcompose",
    "per_layer(knorm)",
}


#: small enough that the cache is cut several times within the test's few decoding steps
DECODE = {"compression_interval": 4, "target_size": 64, "hidden_states_buffer_size": 4}


def _prefill_decoding():
    comp = _kvx("prefill_decoding", **DECODE)
    comp.prefilling = registry("compressor").get("snapkv")(window_size=16)
    comp.validate()
    return comp


def _ratio(press, ratio: float):
    press.compression_ratio = ratio
    return press


def _composed():
    comp = _kvx("composed", second_ratio=0.25)
    comp.first = registry("compressor").get("snapkv")(window_size=16)
    comp.validate()
    return comp


@pytest.mark.parametrize("case", sorted(set(CASES) - CACHE_ONLY))
def test_answers_match_kvpress_pipeline_token_for_token(tiny, engine, case):
    build_kvx, build_press = CASES[case]
    comp = build_kvx()
    pipe = pipeline("kv-press-text-generation", model=tiny.model, tokenizer=tiny.tokenizer, device="cpu")
    c = Cell("ruler_niah_single", NiahSingle(), "tiny", case, comp, 0.5, 0, 2, 400, 8)
    for source in engine.sources(c, tiny):
        prompt = tiny.encode(source.context, source.question, source.answer_prefix)
        expected = pipe(
            source.context,
            question=source.question,
            answer_prefix=source.answer_prefix,
            press=build_press(0.5),
            max_new_tokens=8,
        )["answer"]
        with torch.inference_mode():
            got = compress_and_decode(engine, c, tiny, prompt)[0].text
        assert got == expected, case


@pytest.mark.parametrize("case", sorted(CACHE_ONLY))
def test_caches_match_kvpress_hook(tiny, engine, case):
    """The cache (and AdaKV-style head masks) kvx decodes from equals the one kvpress's hook builds."""
    from transformers import DynamicCache

    from kvx.modeling.layers import attention_layers, clear_head_masks
    from kvx.pipeline.compress import compress

    build_kvx, build_press = CASES[case]
    comp = build_kvx()
    c = Cell("ruler_niah_single", NiahSingle(), "tiny", case, comp, 0.5, 0, 1, 400, 8)
    source = engine.sources(c, tiny)[0]
    prompt = tiny.encode(source.context, source.question, source.answer_prefix)
    with torch.inference_mode():
        clear_head_masks(tiny.model)
        expected = DynamicCache()
        with build_press(0.5)(tiny.model):
            tiny.model.model(input_ids=prompt.context_ids, past_key_values=expected)
        expected_masks = [getattr(m, "masked_key_indices", None) for m in attention_layers(tiny.model)]
        got, _ = compress(engine.caches, tiny, comp, 0.5, prompt, "false")
        got_masks = [getattr(m, "masked_key_indices", None) for m in attention_layers(tiny.model)]
    for idx in range(len(expected.layers)):
        assert torch.equal(got.layers[idx].keys, expected.layers[idx].keys), (case, idx)
        assert torch.equal(got.layers[idx].values, expected.layers[idx].values), (case, idx)
    for want, have in zip(expected_masks, got_masks):
        assert (want is None) == (have is None)
        if want is not None:
            assert all(torch.equal(a, b) for a, b in zip(want, have))


@pytest.mark.parametrize(("base", "nbits"), [("snapkv", 4), ("tova", 2), ("knorm", 8)])
def test_a_press_on_a_quantized_cache_answers_as_kvpress_with_its_quantized_cache(tiny, engine, base, nbits):
    from transformers import QuantizedCache

    reg = registry("compressor")
    base_press = reg.get(base)(**({"window_size": 16} if base == "snapkv" else {}))
    comp = reg.get("quantized")(nbits=nbits, group_size=32, base=base_press)
    comp.validate()
    c = Cell("ruler_niah_single", NiahSingle(), "tiny", "quantized", comp, 0.5, 0, 2, 400, 8)
    pipe = pipeline("kv-press-text-generation", model=tiny.model, tokenizer=tiny.tokenizer, device="cpu")
    for source in engine.sources(c, tiny):
        prompt = tiny.encode(source.context, source.question, source.answer_prefix)
        cache = QuantizedCache(
            backend="hqq", config=tiny.model.config, nbits=nbits, q_group_size=32, residual_length=128
        )
        # kvpress's pipeline, less its cache clean-up after answering (it slices HQQ's packed codes
        # as tensors and fails once the answer is out): its prefill under the press, its decoding
        inputs = pipe.preprocess(source.context, [source.question], source.answer_prefix, 10**9)
        with torch.inference_mode():
            with comp.base.build_press(0.5)(tiny.model):
                tiny.model.model(input_ids=inputs["context_ids"], past_key_values=cache)
            n_context = inputs["context_ids"].shape[1]
            expected = pipe.generate_answer(inputs["questions_ids"][0], cache, n_context, 8)
        with torch.inference_mode():
            got = compress_and_decode(engine, c, tiny, prompt)[0].text
        assert got == expected
