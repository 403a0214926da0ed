"""Decoding-time compression: the decode runs under the press, alone, and its record says when it
compressed and how big the cache was over the decoding steps."""

from __future__ import annotations

import pytest

from kvx.core.registry import registry
from kvx.pipeline.cell import Cell
from kvx.tasks.ruler import NiahSingle

DECODE = {"compression_interval": 4, "target_size": 64, "hidden_states_buffer_size": 4}


def _cell(name: str, comp, ratio: float = 0.5) -> Cell:
    return Cell("ruler_niah_single", NiahSingle(), "tiny", name, comp, ratio, 0, 2, 400, 12)


@pytest.mark.parametrize(
    ("name", "fields", "phases"),
    [
        ("decoding", DECODE, "decode"),
        ("cam", {**DECODE, "merge_budget": 8}, "decode"),
        ("prefill_decoding", DECODE, "prefill+decode"),
    ],
)
def test_a_decoding_press_decodes_alone_and_records_its_cache_over_the_steps(
    tiny, engine, name, fields, phases
):
    comp = registry("compressor").get(name)(**fields)
    if name == "prefill_decoding":
        comp.prefilling = registry("compressor").get("snapkv")(window_size=16)
    comp.validate()
    cell = _cell(name, comp)
    records = engine.run_cells([cell], tiny, progress=False)[0]
    assert records and all(r.status == "supported" for r in records), [r.reason for r in records]
    for record in records:
        assert record.setting["method_parameter"]["phases"] == phases
        cost = record.compressed.cost
        assert cost["kv_bytes_decode_end"] < cost["kv_bytes"]  # cut back below the prefill's cache
        assert cost["kv_bytes_decode_peak"] >= max(cost["kv_bytes_decode_mean"], cost["kv_bytes_decode_end"])
    ((how, count),) = engine.decodes[cell.identity(tiny.identity).id].items()
    assert how == "alone: decoding-time compression decodes alone" and count == len(records)


def test_a_prefill_only_press_still_decodes_in_the_batch_and_measures_no_decode_bytes(tiny, engine):
    comp = registry("compressor").get("knorm")()
    cell = _cell("knorm", comp)
    records = engine.run_cells([cell], tiny, progress=False)[0]
    assert all("kv_bytes_decode_end" not in r.compressed.cost for r in records)
    assert engine.decodes[cell.identity(tiny.identity).id] == {"batched": len(records)}


def test_diagnostics_that_need_the_compressed_cache_are_not_applicable_after_decoding_compression(
    tiny, engine
):
    comp = registry("compressor").get("decoding")(**DECODE)
    cell = Cell(
        "ruler_niah_single",
        NiahSingle(),
        "tiny",
        "decoding",
        comp,
        0.5,
        0,
        1,
        400,
        12,
        diagnostics=[("likelihood", registry("diagnostic").get("likelihood")())],
    )
    (record,) = engine.run_cells([cell], tiny, progress=False)[0]
    assert record.diagnostics["likelihood"]["status"] == "not_applicable"


def test_dms_says_it_compresses_while_decoding_only_with_decoding_true():
    dms = registry("compressor").get("dms")
    assert not dms(threshold=0.5).compresses_decoding
    assert dms(threshold=0.5, decoding=True).compresses_decoding


def test_compression_ratio_decoding_sweeps_the_ratio_and_decoding_ignores_it():
    reg = registry("compressor")
    ratio_press = reg.get("compression_ratio_decoding")()
    assert ratio_press.setting_spec(0.25, None) != ratio_press.setting_spec(0.5, None)
    target_press = reg.get("decoding")()
    assert target_press.setting_spec(0.25, None) == target_press.setting_spec(0.5, None)
