"""engine/memory.py: the heap is trimmed only when the resident set has grown past its
level over the first batches, at most once per interval, off the caller's thread."""

from __future__ import annotations

import time

import pytest

from engine.memory import HeapTrimmer, resident_bytes


def _wait_for(trimmer: HeapTrimmer, count: int) -> None:
    deadline = time.monotonic() + 5
    while trimmer.num_trims < count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert trimmer.num_trims == count


def test_trims_only_past_the_growth_limit_and_at_most_once_per_interval():
    now, resident = [100.0], [1000]
    trimmer = HeapTrimmer(max_growth=0.05, min_interval=1.0, baseline_batches=3, clock=lambda: now[0],
                          read_resident=lambda: resident[0], trim=lambda _pad: 1)
    for level in (700, 1000, 900):  # the first batches set the baseline: their largest level
        resident[0] = level
        assert not trimmer.maybe_trim()
    assert trimmer.baseline == 1000
    resident[0] = 1050
    assert not trimmer.maybe_trim()  # within 5 %
    resident[0] = 1060
    assert not trimmer.maybe_trim()  # grown, but the resident set was read less than check_interval ago
    now[0] += 2 * trimmer.check_interval
    assert trimmer.maybe_trim()
    _wait_for(trimmer, 1)
    now[0] += 0.5
    assert not trimmer.maybe_trim()  # still grown, but trimmed less than 1 s ago
    now[0] += 0.6
    assert trimmer.maybe_trim()
    _wait_for(trimmer, 2)
    resident[0] = 900
    now[0] += 5
    assert not trimmer.maybe_trim()  # back under the limit: nothing to do


def test_the_real_malloc_trim_runs_where_glibc_has_it():
    resident = [1000]
    trimmer = HeapTrimmer(max_growth=0.05, baseline_batches=1, read_resident=lambda: resident[0])
    if not trimmer.available:
        pytest.skip("not glibc: no malloc_trim")
    trimmer.maybe_trim()
    resident[0] = 2000
    assert trimmer.maybe_trim()
    _wait_for(trimmer, 1)


def test_reads_this_process_resident_set_and_takes_a_batch_record():
    assert resident_bytes() > 10 * 2**20  # a Python process with numpy and torch loaded
    trimmer = HeapTrimmer(baseline_batches=1)
    trimmer.maybe_trim(object())  # the batcher calls listeners with the batch's record
    assert trimmer.baseline is not None or not trimmer.available
