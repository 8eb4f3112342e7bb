"""How the request pipeline cuts a request's inputs into parts (server/request_pipeline.py)."""

from __future__ import annotations

import pytest

from server.request_pipeline import PART_TEXTS, part_bounds


@pytest.mark.parametrize("num_items", [0, 1, PART_TEXTS - 1, PART_TEXTS])
def test_a_request_of_one_part_size_or_less_is_one_part(num_items):
    assert part_bounds(num_items) == [(0, num_items)]


@pytest.mark.parametrize("num_items", [PART_TEXTS + 1, 2 * PART_TEXTS, 1000, 2048, 4097])
def test_a_large_request_starts_small_and_covers_every_item_once_in_order(num_items):
    bounds = part_bounds(num_items)
    assert bounds[0] == (0, PART_TEXTS // 4)  # the part the device waits for alone is the smallest
    assert bounds[1] == (PART_TEXTS // 4, PART_TEXTS // 4 + PART_TEXTS // 2)
    assert all(hi - lo == PART_TEXTS for lo, hi in bounds[2:-1])
    assert 0 < bounds[-1][1] - bounds[-1][0] <= PART_TEXTS
    covered = [i for lo, hi in bounds for i in range(lo, hi)]
    assert covered == list(range(num_items))


def test_the_ramp_holds_for_any_part_size():
    assert part_bounds(5, part_size=1) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    assert part_bounds(9, part_size=4) == [(0, 1), (1, 3), (3, 7), (7, 9)]
