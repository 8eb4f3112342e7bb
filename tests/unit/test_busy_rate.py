"""Retry-After's speed: the device's while it computes, not diluted by idle time or double-counted overlap."""

from __future__ import annotations

import pytest

from rose_embed.engine.contract.interface import retry_after_seconds
from rose_embed.engine.queue.busy_rate import WINDOW_S, BusyRate


def test_a_batch_queued_behind_another_counts_from_the_others_end():
    rate = BusyRate()
    assert rate.record(1000, started=0.0, finished=1.0) == pytest.approx(1000)
    # Launched while the first computed: its second of compute is 1.0 to 2.0, not 0.5 to 2.0.
    assert rate.record(1000, started=0.5, finished=2.0) == pytest.approx(1000)


def test_an_idle_spell_before_a_burst_does_not_slow_the_rate():
    rate = BusyRate()
    rate.record(1000, started=0.0, finished=1.0)
    assert rate.record(1000, started=100.0, finished=101.0) == pytest.approx(1000)
    # So a queue of 5,000 tokens is 5 s of work, as the device computes them.
    assert retry_after_seconds(5000, rate.record(1000, started=300.0, finished=301.0)) == 5


def test_the_rate_follows_the_latest_batches():
    rate = BusyRate()
    for i in range(int(WINDOW_S) + 5):  # slow batches, then as many fast ones
        rate.record(100, started=float(i), finished=float(i + 1))
    now = float(WINDOW_S) + 5
    for i in range(4 * int(WINDOW_S)):
        last = rate.record(400, started=now + i * 0.5, finished=now + (i + 1) * 0.5)
    assert last == pytest.approx(800)
