"""How the request pipeline cuts a request's inputs into parts (server/pipeline/request_pipeline.py)."""

from __future__ import annotations

import pytest

from rose_embed.server.pipeline.request_pipeline import PART_TEXTS, RAMP_TEXTS, part_bounds


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


def test_parts_after_the_ramp_take_the_size_asked():
    ramp = [(0, PART_TEXTS // 4), (PART_TEXTS // 4, PART_TEXTS // 4 + PART_TEXTS // 2)]
    lo = ramp[-1][1]
    assert part_bounds(1000, part_size=200) == ramp + [(start, min(start + 200, 1000)) for start in range(lo, 1000, 200)]


def test_with_part_processes_a_large_request_gives_each_process_one_part_within_bounds():
    from types import SimpleNamespace

    from rose_embed.server.runtime import Runtime
    from tests.support.fake_engine import FakeEngine, fake_config

    runtime = Runtime(fake_config(), engine=FakeEngine())
    model = runtime.models[0]
    assert model.view.tokenizer.holds_the_gil  # the default model's ASCII fast path: what the processes serve
    assert runtime.part_texts(model, 1000) == PART_TEXTS  # tokenized in place: the usual parts
    runtime.part_processes = SimpleNamespace(num_processes=8, is_usable=True)
    part_texts = runtime.part_texts(model, 1000)
    assert part_texts == -(-(1000 - sum(RAMP_TEXTS)) // 8)
    assert len(part_bounds(1000, part_texts)) == len(RAMP_TEXTS) + 8
    assert runtime.part_texts(model, 100) == PART_TEXTS  # never smaller than the usual parts
    assert runtime.part_texts(model, 100_000) == 256  # nor so large that the device waits for them
    runtime.tokenizer_pool.shutdown()
