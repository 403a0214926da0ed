"""kvx.modeling.costs: the bytes a cache holds when decoding starts, counted from its tensors and checked
against the formula of each kind of compressor by hand; the cost every record and cell carries."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from kvx.compressors.hqq import HQQCache
from kvx.core.records import as_dicts, cost_metrics, validate
from kvx.core.registry import registry
from kvx.core.setting import n_kept
from kvx.modeling.costs import cache_cost, held_bytes
from kvx.modeling.heap import PeakMemory
from kvx.pipeline.cell import Cell
from kvx.pipeline.compress import compress
from kvx.pipeline.encode import encode
from kvx.pipeline.engine import Engine
from kvx.tasks.ruler import NiahSingle

LAYERS, KV_HEADS, HEAD_DIM, F32 = 3, 2, 16, 4  # the tiny fixture: 3 layers, 2 KV heads of 16, float32


def cell(name: str, ratio: float = 0.5, n_sources: int = 2, **fields) -> Cell:
    comp = registry("compressor").get(name)(**fields)
    return Cell("ruler_niah_single", NiahSingle(), "tiny", name, comp, ratio, 0, n_sources, 400, 4)


@pytest.fixture(scope="module")
def source(tiny, tmp_path_factory):
    engine = Engine(Path(tmp_path_factory.mktemp("costs")), 2**30)
    prompt = encode(tiny, engine.sources(cell("snapkv"), tiny)[0])
    return engine, prompt, int(prompt.context_ids.shape[1])


def compressed(tiny, source, name: str, ratio: float, **fields):
    engine, prompt, _ = source
    comp = registry("compressor").get(name)(**fields)
    with torch.inference_mode():
        return compress(engine.caches, tiny, comp, ratio, prompt, False)


def test_full_cache_holds_every_token_of_every_layer(tiny, source) -> None:
    engine, prompt, n = source
    capture = engine.caches.capture(tiny, prompt.context_ids)
    assert cache_cost(capture.full_cache()) == {"kv_bytes": LAYERS * 2 * KV_HEADS * n * HEAD_DIM * F32}


def test_a_plain_press_holds_its_kept_tokens(tiny, source) -> None:
    _, _, n = source
    cache, _ = compressed(tiny, source, "snapkv", 0.5)
    cost = cache_cost(cache, tiny.model)
    assert cost["kv_bytes"] == LAYERS * 2 * KV_HEADS * n_kept(n, 0.5) * HEAD_DIM * F32
    assert cost["masked_share"] == 0.0


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("group", [16, 32])
def test_hqq_holds_packed_codes_scales_zeros_and_its_residual(tiny, source, bits, group) -> None:
    """Per layer, keys and values each: ``N * bits / 8`` bytes of packed codes plus one float32
    scale and one zero per group of ``group`` elements (N = heads x tokens x head_dim; HQQ asks N
    to be whole groups); the full-precision residual is empty when decoding starts and holds each token
    fed after it until it reaches ``residual_length``."""
    engine, prompt, n = source
    capture = engine.caches.capture(tiny, prompt.context_ids)
    cache = HQQCache(bits=bits, group_size=group).compress_captured(tiny.model, capture, 0.5)
    elements = KV_HEADS * n * HEAD_DIM
    per_tensor = elements * bits // 8 + 2 * (elements // group) * F32
    assert held_bytes(cache) == LAYERS * 2 * per_tensor
    fed = 3  # question tokens go to the residual, in full precision
    with torch.inference_mode():
        ids = prompt.question_ids[:, :fed]
        tiny.model(input_ids=ids, past_key_values=cache, position_ids=torch.arange(n, n + fed)[None])
    assert held_bytes(cache) == LAYERS * 2 * (per_tensor + KV_HEADS * fed * HEAD_DIM * F32)


def test_adakv_holds_what_it_masks_and_says_how_much(tiny, source) -> None:
    _, _, n = source
    cache, _ = compressed(tiny, source, "adakv", 0.5)
    cost = cache_cost(cache, tiny.model)
    assert cost["kv_bytes"] == LAYERS * 2 * KV_HEADS * n * HEAD_DIM * F32  # nothing removed
    # every layer masks heads x (n - n_kept) positions, each a key row and a value row
    assert cost["masked_share"] == pytest.approx((n - n_kept(n, 0.5)) / n, abs=1e-12)


def test_think_holds_zeroed_key_channels(tiny, source) -> None:
    _, _, n = source
    cache, _ = compressed(tiny, source, "think", 0.25)  # half of the key channels pruned
    cost = cache_cost(cache, tiny.model)
    assert cost["kv_bytes"] == LAYERS * 2 * KV_HEADS * n * HEAD_DIM * F32
    pruned = int(HEAD_DIM * 0.5)
    assert cost["masked_share"] == pytest.approx(pruned / (2 * HEAD_DIM), abs=1e-12)  # keys are half


def test_pyramidkv_holds_each_layer_its_own_length(tiny, source) -> None:
    _, _, n = source
    cache, _ = compressed(tiny, source, "pyramidkv", 0.5)
    setting = registry("compressor").get("pyramidkv")().setting(0.5, n, tiny.model)
    budgets = setting.method_parameter["kept_tokens_per_layer"]
    assert len(set(budgets)) > 1  # uneven layers, or the test shows nothing
    assert [cache.get_seq_length(i) for i in range(LAYERS)] == budgets
    assert held_bytes(cache) == sum(2 * KV_HEADS * b * HEAD_DIM * F32 for b in budgets)


def test_records_and_cells_carry_their_cost(tiny, engine) -> None:
    cells = [cell("snapkv"), cell("hqq", 0.5, group_size=16)]  # SnapKV decodes with the control, HQQ alone
    records = engine.run_cells(cells, tiny, progress=False)
    for rows, batched in zip(records, [True, False]):
        for record in as_dicts(rows):
            validate(record)
            n = record["n_context_tokens"]
            full, comp = record["full"]["cost"], record["compressed"]["cost"]
            assert full["kv_bytes"] == LAYERS * 2 * KV_HEADS * n * HEAD_DIM * F32
            assert "masked_share" not in full and "compress_s" not in full
            assert comp["new_tokens"] == len(record["compressed"]["token_ids"])
            assert full["new_tokens"] == len(record["full"]["token_ids"])
            assert comp["question_ms"] > 0 and comp["compress_s"] > 0 and comp["prefill_s"] > 0
            assert (comp["decode_ms_per_token"] is None) == (comp["new_tokens"] == 1)
            if batched:  # SnapKV: batched with the control, which the first cell decoded
                assert comp["kv_bytes"] == LAYERS * 2 * KV_HEADS * n_kept(n, 0.5) * HEAD_DIM * F32
                assert comp["decode_rows"] == 2 and full["decode_rows"] == 2
            else:  # 4-bit codes and a scale and a zero per 16 elements; the residual still empty
                elements = KV_HEADS * n * HEAD_DIM
                assert comp["kv_bytes"] == LAYERS * 2 * (elements // 2 + 2 * (elements // 16) * F32)
                assert comp["decode_rows"] == 1
    snap = as_dicts(records[0])
    metrics = cost_metrics(snap)
    total = sum(r["compressed"]["cost"]["kv_bytes"] for r in snap)
    assert metrics["kv_bytes_ratio"] == total / sum(r["full"]["cost"]["kv_bytes"] for r in snap)
    assert metrics["retained_share_nominal"] == pytest.approx(
        sorted(r["setting"]["retained_share"] for r in snap)[0], abs=0.01
    )


def test_cost_metrics_by_hand() -> None:
    def record(kv, full, share, status="supported", **timing):
        comp = {"kv_bytes": kv, "question_ms": 10.0, "decode_ms_per_token": None, "new_tokens": 1}
        comp |= timing
        return {
            "status": status,
            "setting": {"retained_share": share},
            "compressed": {"cost": comp} if status == "supported" else None,
            "full": {"cost": {"kv_bytes": full, "question_ms": 8.0, "new_tokens": 2}},
        }

    records = [
        record(100, 400, 0.25, compress_s=0.5, decode_ms_per_token=3.0),
        record(300, 400, 0.75, compress_s=1.5),
        record(999, 400, 0.1, status="error"),  # never counted
    ]
    out = cost_metrics(records)
    assert out["kv_bytes_ratio"] == 0.5  # (100 + 300) / (400 + 400), not a mean of 0.25 and 0.75
    assert out["kv_bytes_median"] == 200 and out["full_kv_bytes_median"] == 400
    assert out["compress_s_median"] == 1.0 and out["retained_share_nominal"] == 0.5
    assert out["decode_ms_per_token_median"] == 3.0  # the record without one is left out
    assert "prefill_s_median" not in out and "masked_share_median" not in out  # no record has them
    assert cost_metrics([{**records[0], "compressed": {"cost": None}, "full": None}]) == {
        "retained_share_nominal": 0.25
    }


def _hwm() -> int:
    return int(re.search(r"VmHWM:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) * 1024


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="Linux /proc only")
def test_peak_memory_sees_the_block_and_keeps_the_process_peak() -> None:
    before = _hwm()
    with PeakMemory() as peak:
        block = bytearray(before + 64 * 2**20)  # above every earlier peak: the kernel's mark moves
        block[::4096] = b"\1" * len(block[::4096])
        del block
    assert peak.bytes == _hwm() and peak.bytes >= before + 64 * 2**20
    with PeakMemory() as small:  # below the process peak: sampled, and the process peak is kept
        block = bytearray(32 * 2**20)
        block[::4096] = b"\1" * len(block[::4096])
        import time

        time.sleep(0.1)
        del block
    assert 32 * 2**20 < small.bytes < peak.bytes and _hwm() >= peak.bytes


def test_a_control_stored_without_cost_gets_its_bytes_from_the_capture(tiny, tmp_path) -> None:
    """Controls decoded before answers carried costs are reused as they are; the FullCache bytes
    come from the capture the compression made (timings stay unknown), and are stored back."""
    Engine(tmp_path, 2**30).run_cells([cell("snapkv")], tiny, progress=False)
    stored = list((tmp_path / "controls").rglob("*.json"))
    assert stored
    for path in stored:  # as an older kvx wrote them
        answer = json.loads(path.read_text())
        del answer["cost"]
        path.write_text(json.dumps(answer))
    again = Engine(tmp_path, 2**30)
    rows = as_dicts(again.run_cells([cell("tova")], tiny, progress=False)[0])
    assert again.controls.computed == 0  # reused, not decoded again
    for record in rows:
        n = record["n_context_tokens"]
        assert record["full"]["cost"] == {"kv_bytes": LAYERS * 2 * KV_HEADS * n * HEAD_DIM * F32}
        validate(record)
    assert all(json.loads(p.read_text())["cost"] for p in stored)
    assert "kv_bytes_ratio" in cost_metrics(rows)
