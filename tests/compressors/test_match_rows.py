"""Matching kept cache rows back to the positions they came from (projected retained maps)."""

from __future__ import annotations

import torch

from kvx.compressors.wrappers import match_rows


def test_each_kept_row_is_found_at_its_position_in_the_order_kept():
    full = torch.tensor([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0]])
    assert match_rows(full[[3, 0, 2]], full) == [3, 0, 2]


def test_a_row_missing_or_ambiguous_gives_no_map():
    full = torch.tensor([[0.0, 1.0], [2.0, 3.0], [2.0, 3.0], [6.0, 7.0]])
    assert match_rows(torch.tensor([[9.0, 9.0]]), full) is None  # not in the cache it came from
    assert match_rows(full[[1]], full) is None  # rows 1 and 2 are the same: which one was kept?
    assert match_rows(full[[3, 0]], full) == [3, 0]  # a duplicate elsewhere does not matter
