"""The kvpress catalog's explicit dataclasses against kvpress itself, and every built-in press's field checks.

The catalog copies each press's plain-valued fields and defaults so that registering its config node
never imports kvpress; these tests catch a kvpress upgrade that adds, drops or changes one.
"""

from __future__ import annotations

import dataclasses
import typing

import pytest

from kvx.core.errors import ConfigError
from kvx.core.registry import registry

#: every press kvpress exports -> the kvx press that runs it (its bare form; wrappers take any base)
EXPOSED = {
    "AdaKVPress": "adakv",
    "BlockPress": "block",
    "CAMPress": "cam",
    "CapPress": "cap",
    "ChunkKVPress": "chunkkv",
    "ChunkPress": "chunk",
    "CompactorPress": "compactor",
    "CompressionRatioDecodingPress": "compression_ratio_decoding",
    "ComposedPress": "composed",
    "CriticalAdaKVPress": "critical_adakv",
    "CriticalKVPress": "critical",
    "CURPress": "cur",
    "DecodingPress": "decoding",
    "DMSPress": "dms",
    "EntropyGatedChunkKVPress": "entropy_gated_chunkkv",
    "ExpectedAttentionPress": "expected_attention_plain",
    "KeyDiffPress": "keydiff",
    "KeyRerotationPress": "key_rerotation",
    "KnormPress": "knorm",
    "KVComposePress": "kvcompose",
    "KVgradPress": "kvgrad",
    "KVzipPress": "kvzip",
    "LagKVPress": "lagkv",
    "LeverageScorePress": "leverage",
    "MergingPress": "merging",
    "NonCausalAttnPress": "non_causal_attention",
    "ObservedAttentionPress": "observed_attention",
    "PerLayerCompressionPress": "per_layer",
    "PrefillDecodingPress": "prefill_decoding",
    "PyramidKVPress": "pyramidkv",
    "RandomPress": "random",
    "SimLayerKVPress": "simlayerkv",
    "SnapKVPress": "snapkv",
    "StreamingLLMPress": "streaming_llm",
    "ThinKPress": "think",
    "TOVAPress": "tova",
}
#: every press kvpress exports that kvx does not run, and why
EXCLUDED = {
    "BasePress": "the abstract base of every press",
    "ScorerPress": "the abstract base of the scoring presses (each concrete one is exposed)",
    "DuoAttentionPress": "downloads its head patterns (or, on the fly, the booksum dataset) from the hub",
    "ExpectedAttentionStatsPress": "downloads query statistics from the hub (or computes them on booksum)",
    "FastKVzipPress": "downloads its trained gates from the hub (Jang-Hyun/Fast-KVzip)",
    "KVzapPress": "downloads its trained scorer from the hub",
    "LUKVPress": "downloads its budget curve from GitHub at run time",
    "QFilterPress": "downloads its Q-filters from the hub",
    "RestoreKVPress": "downloads LoRA adapters and restore embeddings from the hub",
    "FinchPress": "needs the question after a delimiter token inside the prefill (its window): not run yet",
}
#: deliberate departures from kvpress's defaults
KVX_DEFAULTS = {("random", "seed"): 0}
_PLAIN = (int, float, bool, str)


def exported_presses() -> list[str]:
    import kvpress

    return sorted(n for n in kvpress.__all__ if isinstance(getattr(kvpress, n), type) and n.endswith("Press"))


def unaccounted(names: list[str]) -> list[str]:
    """kvpress presses kvx neither runs nor excludes with a reason: a new kvpress release's."""
    return sorted(set(names) - set(EXPOSED) - set(EXCLUDED))


def test_every_kvpress_press_is_exposed_or_excluded_with_a_reason() -> None:
    assert unaccounted(exported_presses()) == []
    assert not set(EXPOSED) & set(EXCLUDED)
    assert set(EXPOSED) | set(EXCLUDED) <= set(exported_presses())  # no press kvpress dropped


def test_a_new_kvpress_press_fails_the_drift_check() -> None:
    assert unaccounted([*exported_presses(), "BrandNewPress"]) == ["BrandNewPress"]


def test_every_exposed_press_is_registered_and_builds_its_kvpress_class() -> None:
    import kvpress

    builtin = {e.name: e for e in registry("compressor").entries if e.dist == "kvx"}
    for press_class, name in EXPOSED.items():
        assert name in builtin, name
        comp = builtin[name].load()(**({"compression_ratios": [0.5] * 3} if name == "per_layer" else {}))
        if name == "dms":
            comp.threshold = 0.5
        assert isinstance(comp.build_press(0.25), getattr(kvpress, press_class)), name


def _plain(hint: typing.Any) -> bool:
    """A value a config can hold: a scalar, a string Literal, or an optional scalar."""
    if hint in _PLAIN:
        return True
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is typing.Literal:
        return all(isinstance(a, str) for a in args)
    return typing.get_origin(hint) is typing.Union and len(args) == 1 and args[0] in _PLAIN


def _press_fields(press_cls: type) -> dict[str, typing.Any]:
    hints = typing.get_type_hints(press_cls)
    return {
        f.name: f.default
        for f in dataclasses.fields(press_cls)
        if f.init and f.name != "compression_ratio" and not f.name.startswith("_") and _plain(hints[f.name])
    }


#: kvx presses whose fields are not kvpress's one to one, and why
RESHAPED = {
    "think": "kvx's ratio sets key_channel_compression_ratio (twice the ratio: only keys shrink)",
    "composed": "two slots and second_ratio stand for the list of presses",
    "critical": "CriticalKVPress takes its press in __init__ (not a dataclass field)",
    "compression_ratio_decoding": "the run's ratio is its target_compression_ratio",
    "prefill_decoding": "two slots; its fields are its DecodingPress's (checked under DecodingPress)",
}


@pytest.mark.parametrize("press_class", sorted(EXPOSED))
def test_fields_and_defaults_match_kvpress(press_class: str) -> None:
    import kvpress

    name = EXPOSED[press_class]
    if name in RESHAPED:
        pytest.skip(RESHAPED[name])
    cls = registry("compressor").get(name)
    expected = {
        k: KVX_DEFAULTS.get((name, k), v) for k, v in _press_fields(getattr(kvpress, press_class)).items()
    }
    ours = {f.name: f.default for f in dataclasses.fields(cls) if "slot" not in f.metadata}
    if name == "per_layer":
        ours.pop("compression_ratios")  # a list: required in kvpress, given by the user in kvx
    assert ours == expected


@pytest.mark.parametrize(
    ("name", "fields", "key"),
    [
        ("snapkv", {"window_size": -5}, "press.window_size=-5"),
        ("snapkv", {"kernel_size": 4}, "press.kernel_size=4"),
        ("adakv", {"alpha_safeguard": 1.5}, "press.alpha_safeguard=1.5"),
        ("pyramidkv", {"beta": 0}, "press.beta=0"),
        ("streaming_llm", {"n_sink": -1}, "press.n_sink=-1"),
        ("think", {"window_size": 0}, "press.window_size=0"),
        ("chunkkv", {"chunk_length": 0}, "press.chunk_length=0"),
        ("hqq", {"bits": 3}, "press.bits=3"),
        ("hqq", {"group_size": 0}, "press.group_size=0"),
        ("hqq", {"residual_length": -1}, "press.residual_length=-1"),
        ("block", {"block_size": 0}, "press.block_size=0"),
        ("expected_attention_plain", {"n_future_positions": 0}, "press.n_future_positions=0"),
        ("critical", {"first_stage_ratio": 2.0}, "press.first_stage_ratio=2.0"),
        ("merging", {"merge_fraction": 0.0}, "press.merge_fraction=0"),
        ("entropy_gated_chunkkv", {"low_entropy_chunk_length": 10}, "press.low_entropy_chunk_length=10"),
        ("per_layer", {"compression_ratios": [0.5, 1.5]}, r"press.compression_ratios[1]=1.5"),
        ("dms", {"sliding_window_size": -1}, "press.sliding_window_size=-1"),
        ("cap", {"tau": -1.0}, "press.tau=-1.0"),
        ("kvcompose", {"agg_task": "median"}, "press.agg_task='median'"),
        ("simlayerkv", {"lazy_threshold": 2.0}, "press.lazy_threshold=2.0"),
        ("kvzip", {"chunk_size": 0}, "press.chunk_size=0"),
        ("lagkv", {"lag_size": 0}, "press.lag_size=0"),
        ("cur", {"leverage_type": "both"}, "press.leverage_type='both'"),
        ("leverage", {"sketch_dimension": 0}, "press.sketch_dimension=0"),
        ("compactor", {"blending": 2.0}, "press.blending=2.0"),
        ("non_causal_attention", {"chunk_size": 0}, "press.chunk_size=0"),
    ],
)
def test_press_fields_are_checked(name: str, fields: dict[str, typing.Any], key: str) -> None:
    cls = registry("compressor").get(name)
    valid = {"per_layer": {"compression_ratios": [0.5]}, "dms": {"threshold": 0.5}}.get(name, {})
    cls(**valid).validate()  # the defaults are valid
    with pytest.raises(ConfigError, match=key.replace(".", r"\.").replace("(", r"\(").replace("[", r"\[")):
        cls(**{**valid, **fields}).validate()


def test_a_wrapper_refuses_a_base_that_is_not_a_scorer_and_names_the_base_field() -> None:
    reg = registry("compressor")
    with pytest.raises(ConfigError, match="press.base: .*ThinK is not one"):
        reg.get("adakv")(base=reg.get("think")()).validate()
    with pytest.raises(ConfigError, match=r"press\.base\.window_size=-5"):
        reg.get("chunkkv")(base=reg.get("snapkv")(window_size=-5)).validate()
    with pytest.raises(ConfigError, match="per layer"):
        reg.get("per_layer")().validate()
    with pytest.raises(ConfigError, match="threshold is not set"):
        reg.get("dms")().validate()
