"""The position-only turn selectors against the public TPBench release (kentech-sail/TPBench).

The expected turn lists below were transcribed by hand from the ``[Tn]`` markers of the release's
saved contexts (the ``methods`` map of ``data/construction/<dataset>_compressed_r<ratio>.jsonl``;
``dialogue_id``, ``n_turns`` and ``k_turns`` are the rows' own fields). The release's rules
(``scripts/builders/construction.py``: ``method_random_seed42``, ``method_uniform_stride``) are
restated independently in the sweeps.
"""

from __future__ import annotations

import hashlib
from decimal import ROUND_FLOOR, ROUND_HALF_EVEN, Decimal
from fractions import Fraction

import numpy as np
import pytest

from kvx.core.source import Segment, Source
from kvx.pipeline.transform import transform_source
from kvx.transforms.turns import selection
from kvx.turn_selectors.base import Turn, dialogue_seed, keep_count
from kvx.turn_selectors.positional import Earliest, RandomTurns, Recency, UniformStride

# (file, release dialogue_id, n_turns, k_turns, random_seed42 kept, uniform_stride kept)
RELEASE_ROWS = [
    ("sgd_compressed_r30", "v20_sgd_18_00112__qa_00", 18, 5, [3, 9, 10, 14, 16], [0, 4, 7, 11, 14]),
    ("sgd_compressed_r30", "v20_sgd_17_00069__qa_00", 20, 6, [3, 9, 10, 17, 18, 19], [0, 3, 7, 10, 13, 17]),
    (
        "sgd_compressed_r30",
        "v20_sgd_109_00078__qa_01",
        28,
        8,
        [0, 1, 8, 12, 21, 22, 24, 25],
        [0, 4, 7, 10, 14, 18, 21, 24],
    ),
    ("multiwoz_compressed_r30", "v20_multiwoz_WOZ20033.json__qa_00", 8, 2, [3, 7], [0, 4]),
    (
        "multiwoz_compressed_r30",
        "v20_multiwoz_PMUL2499.json__qa_00",
        20,
        6,
        [2, 4, 6, 9, 12, 19],
        [0, 3, 7, 10, 13, 17],
    ),
    (
        "multiwoz_compressed_r30",
        "v20_multiwoz_MUL1031.json__qa_01",
        28,
        8,
        [1, 4, 8, 11, 12, 16, 19, 21],
        [0, 4, 7, 10, 14, 18, 21, 24],
    ),
    ("sgd_compressed_r10", "v20_sgd_18_00112__qa_00", 18, 2, [3, 16], [0, 9]),
    ("sgd_compressed_r10", "v20_sgd_17_00069__qa_00", 20, 2, [9, 18], [0, 10]),
    ("sgd_compressed_r10", "v20_sgd_109_00078__qa_01", 28, 3, [8, 12, 24], [0, 9, 19]),
    ("sgd_compressed_r10", "v20_sgd_34_00073__qa_02", 20, 2, [14, 17], [0, 10]),
    ("sgd_compressed_r10", "v20_sgd_81_00007__qa_00", 38, 4, [2, 7, 15, 35], [0, 10, 19, 28]),
]


def turns(n: int) -> list[Turn]:
    return [Turn(i, "user" if i % 2 == 0 else "system", f"utterance {i}") for i in range(n)]


@pytest.mark.parametrize(("file", "did", "n", "k", "kept_random", "kept_stride"), RELEASE_ROWS)
def test_selectors_keep_the_release_turns(file, did, n, k, kept_random, kept_stride):
    ratio = int(file[-2:]) / 100
    assert keep_count(n, ratio) == k
    assert RandomTurns().select(turns(n), k, did) == kept_random
    assert UniformStride().select(turns(n), k, did) == kept_stride
    assert Recency().select(turns(n), k, did) == list(range(n - k, n))
    assert Earliest().select(turns(n), k, did) == list(range(k))


def test_content_selector_budgets_match_the_release():
    # sgd_compressed_r10: the attention_h2o_cache / embedding_mmr_cache rows record kept_turn_ids:
    # n=20 keeps [0, 1] and [7, 8]; n=38 keeps [0, 1, 2] and [29, 34, 36] (floor), where round keeps 4
    assert keep_count(20, 0.1, "floor") == 2
    assert keep_count(38, 0.1, "floor") == 3 and keep_count(38, 0.1) == 4
    # multiwoz_compressed_r30 row v20_multiwoz_PMUL0841.json__qa_00: n=22, k_turns=7 (round, not floor)
    assert keep_count(22, 0.3) == 7 and keep_count(22, 0.3, "floor") == 6


def test_random_seed_is_the_release_hash():
    did = "v20_sgd_18_00112__qa_00"
    digest = hashlib.sha256(b"42|v20_sgd_18_00112__qa_00").hexdigest()
    assert dialogue_seed(42, did) == int(digest[:16], 16) % 2**32
    assert dialogue_seed(42, did) < 2**32
    # the seed stays a field: another seed hashes "43|..." and keeps other turns
    assert RandomTurns(seed=43).select(turns(18), 5, did) != [3, 9, 10, 14, 16]
    # the release's id string, not the SGD dialogue id, reproduces its saved context
    assert RandomTurns().select(turns(18), 5, "18_00112") != [3, 9, 10, 14, 16]


def test_the_transform_seeds_with_the_release_id():
    did = "v20_sgd_109_00078__qa_01"
    segments = [Segment("header", "Context:")] + [
        Segment(f"T{t.index}", f"[T{t.index}] {t.speaker.upper()}: {t.text}", t.speaker) for t in turns(28)
    ]
    meta = {"dialogue_id": "109_00078", "release_id": did}
    source = Source.from_segments(segments, "\n", id="p", question="q", answers=["a"], metadata=meta)
    out = transform_source(selection("random", RandomTurns(), 0.3, True), "turns:random", source)
    assert out.info["kept_segment_ids"] == ["header"] + [f"T{i}" for i in [0, 1, 8, 12, 21, 22, 24, 25]]
    meta = {"dialogue_id": did}
    plain = Source.from_segments(segments, "\n", id="p", question="q", answers=["a"], metadata=meta)
    out = transform_source(selection("random", RandomTurns(), 0.3, True), "turns:random", plain)
    assert out.info["kept_segment_ids"][1:] == [f"T{i}" for i in [0, 1, 8, 12, 21, 22, 24, 25]]


def stride_rule(n: int, k: int) -> list[int]:
    """The release's uniform stride restated with numpy: float step n / k, times i, half to even."""
    if k >= n:
        return list(range(n))
    picks = np.rint(np.arange(k, dtype=np.float64) * np.float64(n / k))
    return sorted({int(p) for p in np.minimum(n - 1, picks)})


def test_uniform_stride_sweep_against_the_rule():
    exact_differs = []
    for n in range(1, 61):
        for k in range(1, n + 1):
            kept = UniformStride().select(turns(n), k, "d")
            assert kept == stride_rule(n, k), (n, k)
            assert len(kept) == k and kept[0] == 0
            exact = sorted({min(n - 1, round(Fraction(i * n, k))) for i in range(k)})
            if exact != kept:
                exact_differs.append((n, k))
    # where the float product i * (n / k) lands off an exact .5 tie; kvx follows the release's floats
    assert exact_differs == [
        (25, 22), (29, 14), (29, 28), (34, 28), (50, 44), (51, 42),
        (57, 26), (57, 52), (58, 28), (58, 56), (59, 42), (59, 58),
    ]  # fmt: skip
    assert UniformStride().select(turns(29), 14, "d")[7] == 15  # 7 * (29 / 14) = 14.500000000000002


@pytest.mark.parametrize("ratio", [0.10, 0.30, 0.50, 0.70])
def test_budgets_sweep_against_the_rule(ratio):
    for n in range(1, 61):
        product = Decimal(n * ratio)  # the float product, exactly
        rounded = int(product.to_integral_value(ROUND_HALF_EVEN))
        floored = int(product.to_integral_value(ROUND_FLOOR))
        assert keep_count(n, ratio) == min(n, max(1, rounded)), n
        assert keep_count(n, ratio, "floor") == min(n, max(1, floored)), n
        k = keep_count(n, ratio)
        kept = RandomTurns().select(turns(n), k, f"v20_sgd_{n}__qa_00")
        assert kept == sorted(set(kept)) and len(kept) == k and kept[0] >= 0 and kept[-1] < n


def test_budget_ties_and_float_products_by_hand():
    assert keep_count(15, 0.3) == 4  # 4.5 rounds half to even
    assert keep_count(25, 0.3) == 8  # 7.5
    assert keep_count(5, 0.1) == 1  # 0.5 -> 0, then at least one turn
    assert keep_count(45, 0.7) == 31  # 45 * 0.7 == 31.499999999999996, not 31.5
    assert keep_count(50, 0.58, "floor") == 28  # 50 * 0.58 == 28.999999999999996


def test_changed_rules_are_new_cells():
    # random and uniform_stride changed picks (revision 2): their identity says so, and the
    # unchanged selectors keep the identity older stores hold
    assert selection("random", RandomTurns(), 0.3, True).options == {"seed": 42, "revision": 2}
    assert selection("uniform_stride", UniformStride(), 0.3, True).options == {"revision": 2}
    assert selection("recency", Recency(), 0.3, True).options == {}
    assert selection("earliest", Earliest(), 0.3, True).options == {}
