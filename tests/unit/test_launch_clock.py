"""When the engine loop launches a GPU's next batch (engine/queue/launch_clock.py): shortly before the
work in flight is due to end, estimated from the speed measured at warm-up and then on the batches
that land."""

from __future__ import annotations

import pytest

from rose_embed.engine.queue.launch_clock import LEAD_SECONDS, SMOOTHING, LaunchClock


def test_with_nothing_in_flight_the_next_batch_goes_at_once():
    assert LaunchClock(1000.0).seconds_to_launch(5.0) == 0.0


def test_the_next_batch_waits_until_shortly_before_the_one_in_flight_ends():
    clock = LaunchClock(tokens_per_second=100_000.0)
    clock.launched(1000, now=10.0)  # due to take 10 ms
    assert clock.seconds_to_launch(10.0) == pytest.approx(0.010 - LEAD_SECONDS)
    assert clock.seconds_to_launch(10.006) == pytest.approx(0.004 - LEAD_SECONDS)
    assert clock.seconds_to_launch(10.009) == 0.0


def test_a_batch_launched_behind_another_is_due_after_it():
    clock = LaunchClock(tokens_per_second=100_000.0)
    clock.launched(1000, now=10.0)
    clock.launched(500, now=10.008)  # starts when the first ends, at 10.010
    assert clock.seconds_to_launch(10.008) == pytest.approx(0.015 - 0.008 - LEAD_SECONDS)


def test_a_landing_re_anchors_what_follows_and_teaches_the_speed():
    clock = LaunchClock(tokens_per_second=100_000.0)  # 10 us a token
    clock.launched(1000, now=10.0)
    clock.launched(1000, now=10.008)
    clock.landed(finished=10.020)  # the first took 20 ms, not 10
    per_token = (1 - SMOOTHING) * 1e-5 + SMOOTHING * 2e-5
    assert clock.seconds_per_token == pytest.approx(per_token)
    assert clock.seconds_to_launch(10.020) == pytest.approx(1000 * per_token - LEAD_SECONDS)


def test_without_a_warm_up_speed_the_first_landing_gives_it():
    clock = LaunchClock()
    clock.launched(2000, now=1.0)
    assert clock.seconds_to_launch(1.0) == 0.0  # nothing known: launch as soon as there is room
    clock.launched(2000, now=1.0)
    clock.landed(finished=1.030)
    assert clock.seconds_per_token == pytest.approx(0.030 / 2000)
    # The second is due 30 ms after the first's end.
    assert clock.seconds_to_launch(1.030) == pytest.approx(0.030 - LEAD_SECONDS)


def test_a_batch_launched_after_the_device_fell_idle_is_timed_from_its_launch():
    clock = LaunchClock(tokens_per_second=100_000.0)
    clock.launched(1000, now=1.0)
    clock.landed(finished=1.010)
    clock.launched(1000, now=2.0)  # the device idled for a second in between
    clock.landed(finished=2.010)
    assert clock.seconds_per_token == pytest.approx(1e-5)
