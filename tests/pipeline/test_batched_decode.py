"""Batched decoding: every answer is the one its cache gives when decoded alone, bit for bit, whatever
else is in the batch; caches that cannot join a batch decode alone and say why."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from kvx.core.records import as_dicts
from kvx.core.registry import registry
from kvx.modeling.capture import cache_over
from kvx.modeling.generation import greedy_decode
from kvx.modeling.reader import attn_implementation
from kvx.pipeline import batched
from kvx.pipeline.batched import DecodeJob, batchable, greedy_decode_batch
from kvx.pipeline.cell import Cell
from kvx.pipeline.compress import compress
from kvx.pipeline.encode import encode
from kvx.pipeline.engine import Engine
from kvx.tasks.ruler import NiahSingle
from kvx.testing.records import unmeasured

N = 3
TOKENS = 6


def cell(name: str, ratio: float = 0.5, **kw) -> Cell:
    comp = registry("compressor").get(name)()
    return Cell("ruler_niah_single", NiahSingle(), "tiny", name, comp, ratio, 0, N, 400, TOKENS, **kw)


def fast_path_names() -> list[str]:
    names = registry("compressor").names()
    return [n for n in names if getattr(registry("compressor").get(n), "fast_path", False)]


def alone(tiny, job: DecodeJob, impl: str | None):
    with attn_implementation(tiny.model, impl):
        return greedy_decode(tiny.model, tiny.tokenizer, job.cache, job.feed, job.start, job.max_new_tokens)


def same(a, b) -> bool:
    return (
        a.token_ids == b.token_ids
        and a.stop_reason == b.stop_reason
        and a.text == b.text
        and torch.equal(a.first_logits, b.first_logits)
    )


@pytest.fixture(scope="module")
def caches(tiny, tmp_path_factory):
    """(label, job factory, attention impl) for the FullCache and every batchable fast-path cache of
    one source, plus the names that must decode alone with their reason."""
    engine = Engine(Path(tmp_path_factory.mktemp("b")), 2**30)
    source = engine.sources(cell("snapkv"), tiny)[0]
    prompt = encode(tiny, source)
    capture = engine.caches.capture(tiny, prompt.context_ids)
    out = [
        ("full", lambda: DecodeJob(capture.full_cache(), prompt.question_ids, capture.n_tokens, TOKENS), None)
    ]
    refused = {}
    with torch.inference_mode():
        for name in fast_path_names():
            comp = registry("compressor").get(name)()
            for ratio in (0.25,):
                try:
                    _, run = compress(engine.caches, tiny, comp, ratio, prompt, False)
                except Exception:  # a setting the tiny model cannot take (HQQ group sizes)
                    continue
                why = batchable(run.build(), run.decode_impl, tiny.model)
                if why:
                    refused[name] = why
                else:
                    out.append((f"{name}@{ratio}", _job(run), run.decode_impl))
                from kvx.modeling.layers import clear_head_masks

                clear_head_masks(tiny.model)
    return out, refused


def _job(run):
    return lambda: DecodeJob(run.build(), run.feed, run.start, TOKENS)


def test_every_batchable_fast_path_press_decodes_token_identical_to_alone(tiny, caches):
    entries, refused = caches
    assert len(entries) >= 12  # full + every batchable fast-path press
    assert {"adakv", "hqq"} <= refused.keys() or "adakv" in refused
    with torch.inference_mode():
        expected = [alone(tiny, make(), impl) for _, make, impl in entries]
        got = greedy_decode_batch(tiny.model, tiny.tokenizer, [make() for _, make, _ in entries])
    for (label, _, _), a, b in zip(entries, expected, got):
        assert same(a, b), label


def test_an_answer_does_not_depend_on_the_rest_of_its_batch(tiny, caches):
    entries, _ = caches
    with torch.inference_mode():
        pick = [entries[i] for i in (0, 3, 7)]
        solo = greedy_decode_batch(tiny.model, tiny.tokenizer, [pick[0][1]()])[0]
        pair = greedy_decode_batch(tiny.model, tiny.tokenizer, [p[1]() for p in pick[:2]])[0]
        three = greedy_decode_batch(tiny.model, tiny.tokenizer, [p[1]() for p in pick])[0]
    assert same(solo, pair) and same(solo, three)


def test_rows_that_stop_early_leave_the_batch_and_budgets_differ(tiny, caches):
    entries, _ = caches
    model = tiny.model
    budgets = (TOKENS, 3, TOKENS)

    def jobs():
        out = [entries[i][1]() for i in range(3)]
        for job, budget in zip(out, budgets):
            job.max_new_tokens = budget
        return out

    with torch.inference_mode():
        first = alone(tiny, entries[0][1](), None)
    old = model.generation_config.eos_token_id
    model.generation_config.eos_token_id = first.token_ids[2]  # the full cache's third token ends it
    try:
        with torch.inference_mode():
            expected = [alone(tiny, job, entries[i][2]) for i, job in enumerate(jobs())]
            got = greedy_decode_batch(model, tiny.tokenizer, jobs())
    finally:
        model.generation_config.eos_token_id = old
    assert got[0].stop_reason == "eos" and len(got[0].token_ids) == 3
    assert len(got[1].token_ids) <= 3
    for a, b in zip(expected, got):
        assert same(a, b)


def test_the_lm_head_recomputes_a_row_whose_margin_rounding_could_flip(tiny, caches, monkeypatch):
    entries, _ = caches
    with torch.inference_mode():
        expected = [alone(tiny, make(), impl) for _, make, impl in entries[:4]]
        monkeypatch.setattr(batched, "_UNIT_ROUNDOFF", 1e-2)  # every margin is now too thin to trust
        heads = []
        original = batched._Head

        class Counting(original):
            def __init__(self, model):
                super().__init__(model)
                heads.append(self)

        monkeypatch.setattr(batched, "_Head", Counting)
        got = greedy_decode_batch(tiny.model, tiny.tokenizer, [make() for _, make, _ in entries[:4]])
    assert heads[0].recomputed > 0
    for a, b in zip(expected, got):
        assert same(a, b)


def test_the_head_tolerance_is_twice_the_dot_product_error_bound():
    class Model:
        def __init__(self):
            self.head = torch.nn.Linear(4, 2, bias=False)
            with torch.no_grad():
                self.head.weight.copy_(torch.tensor([[3.0, 4.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]))

        def get_output_embeddings(self):
            return self.head

    u = 2.0**-24
    gamma = 4 * u / (1 - 4 * u)  # K = 4
    assert math.isclose(batched._Head(Model()).tolerance, 2 * gamma * 5.0)  # max row norm 5


def test_a_linear_whose_batched_product_differs_runs_row_by_row(tiny, caches, monkeypatch):
    entries, _ = caches
    with torch.inference_mode():
        expected = [alone(tiny, make(), impl) for _, make, impl in entries[:3]]
        monkeypatch.setattr(batched._RowLinear, "exact", dict.fromkeys(batched._RowLinear.exact, False))
        got = greedy_decode_batch(tiny.model, tiny.tokenizer, [make() for _, make, _ in entries[:3]])
    for a, b in zip(expected, got):
        assert same(a, b)


def test_jobs_with_different_feeds_are_refused():
    job = DecodeJob(None, torch.tensor([[1, 2]]), 0, 2)
    other = DecodeJob(None, torch.tensor([[1, 3]]), 0, 2)
    with pytest.raises(ValueError, match="one feed"):
        greedy_decode_batch(None, None, [job, other])


def test_source_major_cells_equal_cells_run_one_at_a_time(tiny, tmp_path):
    """Four cells (one query-aware, so its feed differs; one AdaKV, which decodes alone; two with
    diagnostics) source by source give the records of the same cells run one after another, and
    hold no capture after."""

    def diagnostics():
        return [(n, registry("diagnostic").get(n)()) for n in ("coverage", "likelihood", "decoding")]

    grid = [
        cell("snapkv", 0.25, diagnostics=diagnostics()),
        cell("tova", 0.5),
        cell("adakv", 0.5, diagnostics=diagnostics()),  # its head masks must be in place for both
        cell("knorm", 0.5, query_aware=True),
    ]
    one = Engine(tmp_path / "one", 2**30)
    expected = [as_dicts(one.run_cells([c], tiny, progress=False)[0]) for c in grid]
    together = Engine(tmp_path / "together", 2**30)
    got = [as_dicts(r) for r in together.run_cells(grid, tiny, progress=False)]
    for a, b in zip(expected, got):
        for x, y in zip(a, b):
            assert unmeasured(x) == unmeasured(y)  # timings and costs differ; nothing else may
    # the query-aware cell prefills context + question, its own capture: 2 per source either way
    assert together.prefills == one.prefills == 2 * N and together.controls.computed == N
    assert len(together.caches.captures) == 0  # each source's capture left memory with it
    assert len(together.caches.shared) <= len(grid)  # compressed contexts: the last source's only
    ids = [c.identity(tiny.identity).id for c in grid]
    assert together.decodes[ids[0]] == {"batched": N}
    assert together.decodes[ids[2]] == {"alone: per-head masks (AdaKV) decode alone": N}


def test_a_batch_that_fails_leaves_every_cache_as_it_found_it(tiny, caches, monkeypatch):
    """The engine then decodes each job alone, on the caches compression left."""
    entries, _ = caches
    with torch.inference_mode():
        expected = [alone(tiny, make(), impl) for _, make, impl in entries[:3]]
        jobs = [make() for _, make, _ in entries[:3]]

        def broken(self, hidden):
            raise RuntimeError("out of memory")

        monkeypatch.setattr(batched._Head, "argmax", broken)  # fails at step 2, caches already fed
        with pytest.raises(RuntimeError, match="out of memory"):
            greedy_decode_batch(tiny.model, tiny.tokenizer, jobs)
        again = [alone(tiny, job, impl) for job, (_, _, impl) in zip(jobs, entries[:3])]
    for a, b in zip(expected, again):
        assert same(a, b)


def test_caches_over_the_same_tensors_decode_together_and_leave_them_intact(tiny, caches):
    """Decoding appends into buffers of its own: two caches over one set of tensors (a shared
    compressed context; the FullCache over its capture) decode in one batch to the answer alone,
    and the tensors they share hold what they held before."""
    entries, _ = caches
    _, make, impl = entries[1]
    with torch.inference_mode():
        expected = alone(tiny, make(), impl)
        base = make()
        layers = [(layer.keys, layer.values) for layer in base.cache.layers]
        before = [(k.clone(), v.clone()) for k, v in layers]
        twins = [DecodeJob(cache_over(layers), base.feed, base.start, TOKENS) for _ in range(2)]
        got = greedy_decode_batch(tiny.model, tiny.tokenizer, twins)
    assert same(got[0], expected) and same(got[1], expected)
    for (k, v), (k0, v0) in zip(layers, before):
        assert torch.equal(k, k0) and torch.equal(v, v0)
    n = layers[0][0].shape[-2]
    for twin in twins:  # each cache now views its own buffer: the shared prefix, then its answer
        keys = twin.cache.layers[0].keys
        assert keys.shape[-2] == n + base.feed.shape[1] + TOKENS - 1
        assert keys.data_ptr() != layers[0][0].data_ptr()
        assert torch.equal(keys[..., :n, :], layers[0][0])
    assert twins[0].cache.layers[0].keys.data_ptr() != twins[1].cache.layers[0].keys.data_ptr()


def test_cache_over_holds_the_tensors_themselves():
    k, v = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    cache = cache_over([(k, v), (k, v)])
    assert len(cache.layers) == 2 and cache.get_seq_length() == 5
    assert cache.layers[1].keys.data_ptr() == k.data_ptr()  # no copy (DynamicCache.update copies)
    keys, _ = cache.update(torch.ones(1, 2, 1, 4), torch.ones(1, 2, 1, 4), 0)
    assert keys.shape[-2] == 6 and torch.equal(k, cache.layers[1].keys)


def test_a_source_major_decode_holds_no_capture(tiny, tmp_path, monkeypatch):
    """Without diagnostics nothing after compression reads the capture: it leaves memory before
    the decode (which then holds only the caches it reads), as do the compressed contexts no later
    source shares; the records equal those of cells run one at a time, AdaKV's (decoded alone,
    after the batch) included."""
    grid = [cell("snapkv", 0.25), cell("tova", 0.5), cell("adakv", 0.5)]
    one = Engine(tmp_path / "one", 2**30)
    expected = [as_dicts(one.run_cells([c], tiny, progress=False)[0]) for c in grid]
    engine = Engine(tmp_path / "together", 2**30)
    seen = []
    original = batched.greedy_decode_batch

    def spy(model, tokenizer, jobs):
        seen.append((len(engine.caches.captures), dict(engine.caches.shared), dict(engine.caches.held)))
        return original(model, tokenizer, jobs)

    monkeypatch.setattr("kvx.pipeline.decode.greedy_decode_batch", spy)
    got = [as_dicts(r) for r in engine.run_cells(grid, tiny, progress=False)]
    assert seen == [(0, {}, {})] * N  # distinct contexts (RULER haystacks): nothing kept
    for a, b in zip(expected, got):
        for x, y in zip(a, b):
            assert unmeasured(x) == unmeasured(y)


def test_compressed_contexts_stay_for_a_later_source_with_the_same_context(tiny, tmp_path):
    grid = [cell("snapkv", 0.25), cell("tova", 0.5)]
    engine = Engine(tmp_path / "out", 2**30)
    sources = engine.sources(grid[0], tiny)
    twin = dataclasses.replace(sources[0], id="twin", question=sources[1].question)
    key = grid[0].identity(tiny.identity).split_cache_key
    engine._splits[key] = [sources[0], twin, sources[2]]
    engine.run_cells(grid, tiny, progress=False)
    # the twin reused both compressed contexts of the first source: 2 cells x 2 distinct contexts
    assert engine.compressions == 2 * 2


def test_a_decode_budget_splits_the_batch_and_changes_no_answer(tiny, tmp_path):
    """Past the budget the batch so far decodes and the next cache starts a new one (the control
    with the first); answers are those of one batch, and each record says how many batches ran."""
    grid = [cell("snapkv", 0.25), cell("tova", 0.5), cell("knorm", 0.75)]
    whole = Engine(tmp_path / "whole", 2**30)
    one_batch = [as_dicts(r) for r in whole.run_cells(grid, tiny, progress=False)]
    split = Engine(tmp_path / "split", 2**30, decode_budget=1)  # no two caches fit: one batch each
    batches = [as_dicts(r) for r in split.run_cells(grid, tiny, progress=False)]
    for a, b in zip(one_batch, batches):
        for x, y in zip(a, b):
            assert unmeasured(x) == unmeasured(y)
    assert {r["compressed"]["cost"]["decode_batches"] for rs in one_batch for r in rs} == {1}
    assert {r["compressed"]["cost"]["decode_batches"] for rs in batches for r in rs} == {3}
    # rows per batch: the control joins the first batch, every later cache decodes by itself
    assert [r["compressed"]["cost"]["decode_rows"] for r in batches[0]] == [2] * N
    assert [r["compressed"]["cost"]["decode_rows"] for rs in batches[1:] for r in rs] == [1] * (2 * N)
    assert [r["compressed"]["cost"]["decode_rows"] for rs in one_batch for r in rs] == [4] * (3 * N)
    assert split.controls.computed == whole.controls.computed == N


def test_the_budget_counts_the_capture_every_cache_and_its_decode_buffer(tiny, tmp_path):
    """A budget that holds the capture, the control and one compressed row, but not two, decodes
    one compressed cache per batch; a budget one byte larger than two rows keeps them together."""
    from kvx.pipeline.source import _row_bytes

    grid = [cell("snapkv", 0.5), cell("tova", 0.5)]
    probe = Engine(tmp_path / "probe", 2**30)
    rows = [as_dicts(r) for r in probe.run_cells(grid, tiny, progress=False)]
    first = rows[0][0]
    n = first["n_context_tokens"]
    feed = torch.zeros(1, first["n_question_tokens"])
    capture = probe.caches.capture(tiny, tiny.render(probe.sources(grid[0], tiny)[0]).context_ids).nbytes()
    full = _row_bytes(first["full"]["cost"]["kv_bytes"], n, feed, TOKENS)
    kept = [_row_bytes(r[0]["compressed"]["cost"]["kv_bytes"], n // 2, feed, TOKENS) for r in rows]
    kv, q = first["full"]["cost"]["kv_bytes"], first["n_question_tokens"]
    assert kv == 3 * 2 * 2 * n * 16 * 4  # the tiny model: 3 layers, K and V, 2 heads of 16, fp32
    # the cache, and the buffer the decode appends into: the cache again plus the feed and the answer
    assert full == 2 * kv + 3 * 2 * 2 * 16 * 4 * (q + TOKENS)
    both = capture + full + sum(kept)
    tight = Engine(tmp_path / "tight", 2**30, decode_budget=both - 1)
    got = tight.run_cells(grid, tiny, progress=False)
    assert got[0][0].compressed.cost["decode_batches"] == 2
    roomy = Engine(tmp_path / "roomy", 2**30, decode_budget=both)
    got = roomy.run_cells(grid, tiny, progress=False)
    assert got[0][0].compressed.cost["decode_batches"] == 1


def test_the_default_decode_budget_is_a_quarter_of_the_memory():
    import os

    from kvx.modeling.heap import default_budget

    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert default_budget(torch.device("cpu")) == ram // 4
