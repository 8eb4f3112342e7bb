"""server/memory.py: the heap is trimmed at most once per interval, off the caller's thread."""

from __future__ import annotations

import time

import pytest

from server.memory import HeapTrimmer


def test_trims_at_most_once_per_interval_and_only_after_it():
    now = [100.0]
    trimmer = HeapTrimmer(interval=10.0, clock=lambda: now[0])
    if not trimmer.available:
        pytest.skip("not glibc: no malloc_trim")
    assert not trimmer.maybe_trim()  # the interval counts from start-up
    now[0] += 10.5
    assert trimmer.maybe_trim()
    assert not trimmer.maybe_trim()  # due again only 10 s later
    deadline = time.monotonic() + 5
    while trimmer.num_trims < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert trimmer.num_trims == 1
    now[0] += 9.0
    assert not trimmer.maybe_trim()
    now[0] += 1.5
    assert trimmer.maybe_trim()


def test_accepts_a_batch_record_as_a_listener():
    trimmer = HeapTrimmer(interval=0.0)
    trimmer.maybe_trim(object())  # the batcher calls listeners with the batch's record
