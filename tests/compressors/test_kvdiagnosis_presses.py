"""kvx's KVDiagnosis presets build the kvpress presses the paper's release built.

``benchmarks/bench_kvpress_versions.py`` measures the paper's presses under kvpress 0.5.3 and 0.5.5
with the release's composition (its ``src/kvcachebench/presses.py``: ``make_press`` there); what it
finds holds for kvx's cells only while kvx's presets build those same presses, field for field, at
each of the paper's three ratios. HQQ is transformers' cache, not a kvpress press: its bits, group and
residual are pinned the same way.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kvx.compressors.hqq import HQQCache
from kvx.core.registry import registry

BENCH = Path(__file__).parents[2] / "benchmarks" / "bench_kvpress_versions.py"
#: the release's method -> kvx's press and base (conf/press/chunkkv_knorm.yaml: ChunkKV over Knorm)
KVX = {
    "StreamingLLM": ("streaming_llm", None),
    "SnapKV": ("snapkv", None),
    "TOVA": ("tova", None),
    "KeyDiff": ("keydiff", None),
    "AdaKV": ("adakv", None),
    "ThinK": ("think", None),
    "ChunkKV_Knorm": ("chunkkv", "knorm"),
}


def _bench():
    spec = importlib.util.spec_from_file_location("bench_kvpress_versions", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_covers_the_papers_eight_methods() -> None:
    assert set(_bench().PRESSES) == {*KVX, "QuantizedCache"}


@pytest.mark.parametrize("ratio", [0.25, 0.5, 0.75])
@pytest.mark.parametrize("method", sorted(KVX))
def test_kvx_builds_the_release_press(method: str, ratio: float) -> None:
    name, base = KVX[method]
    comp = registry("compressor").get(name)()
    if base is not None:
        comp.base = registry("compressor").get(base)()
    comp.validate()
    release, reason = _bench().make_press(method, ratio)
    if release is None:  # ThinK at 0.75: both refuse it
        assert not comp.press_setting(ratio, 1000, None).supported, reason
        return
    press = comp.build_press(ratio)
    assert type(press) is type(release)
    assert press == release  # dataclass fields, the wrapped press's included


@pytest.mark.parametrize("ratio", [0.25, 0.5, 0.75])
def test_hqq_quantizes_as_the_release(ratio: float) -> None:
    comp = HQQCache()
    assert comp.resolved_bits(ratio) == _bench().HQQ_BITS[ratio]
    assert (comp.group_size, comp.residual_length) == (64, 128)
