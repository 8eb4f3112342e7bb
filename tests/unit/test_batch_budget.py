"""The batch budget chosen at warm-up (engine/rose/batch_budget.py), on a fake device whose batch of n
tokens takes `overhead + n * per_token` seconds of a fake clock: the CPU's smallest budget whose overhead
is a small share of a batch's time, the GPU's smallest power of two as fast as the configured budget
within GPU_EFFICIENCY."""

from __future__ import annotations

import pytest

from rose_embed.engine.rose import batch_budget
from rose_embed.engine.rose.batch_budget import GPU_EFFICIENCY, cpu_budget, gpu_budget


class _Device:
    def __init__(self, overhead: float, per_token: float):
        self.overhead, self.per_token, self.now = overhead, per_token, 0.0
        self.sizes: list[int] = []

    def run(self, seqs) -> None:
        tokens = sum(len(s) for s in seqs)
        self.sizes.append(tokens)
        self.now += self.overhead + tokens * self.per_token

    def launch(self, seqs):
        self.run(seqs)  # the batch's time passes as it is launched behind the one computing

        class _Lazy:
            def wait(self):
                return None

        return _Lazy()


@pytest.fixture
def device(monkeypatch):
    made = []

    def make(overhead: float, per_token: float) -> _Device:
        made.append(_Device(overhead, per_token))
        monkeypatch.setattr(batch_budget.time, "perf_counter", lambda: made[-1].now)
        return made[-1]

    return make


def test_the_cpu_budget_keeps_the_overhead_to_a_twentieth_of_a_batch(device):
    fake = device(overhead=20e-6 * 20, per_token=20e-6)  # the overhead costs what 20 tokens do
    choice = cpu_budget(fake.run, max_batch_tokens=16384)
    assert choice.max_batch_tokens == 384  # 19 x 20 tokens, rounded up to 64
    assert choice.tokens_per_second == pytest.approx(384 / (400e-6 + 384 * 20e-6))


def test_the_cpu_budget_stays_within_the_configured_one(device):
    fake = device(overhead=0.01, per_token=1e-6)
    assert cpu_budget(fake.run, max_batch_tokens=512).max_batch_tokens == 512


def test_the_gpu_budget_is_the_smallest_power_of_two_about_as_fast_as_the_configured_one(device):
    per_token = 1e-7
    fake = device(overhead=128 * per_token, per_token=per_token)  # the overhead costs what 128 tokens do
    choice = gpu_budget(fake.launch, max_batch_tokens=16384)
    assert choice.max_batch_tokens == 4096
    speeds = dict(choice.speeds)
    assert list(speeds) == [1024, 2048, 4096, 8192, 16384]
    assert speeds[4096] >= GPU_EFFICIENCY * speeds[16384] > speeds[2048]
    assert choice.batch_seconds == pytest.approx(128 * per_token + 4096 * per_token)


def test_a_gpu_whose_speed_keeps_rising_keeps_the_configured_budget(device):
    per_token = 1e-7
    fake = device(overhead=4096 * per_token, per_token=per_token)
    choice = gpu_budget(fake.launch, max_batch_tokens=12000)
    assert choice.max_batch_tokens == 12000
    assert [n for n, _ in choice.speeds] == [1024, 2048, 4096, 8192, 12000]
    assert set(fake.sizes) == {1024, 2048, 4096, 8192, 12000 // 32 * 32}  # texts of 32 tokens


def test_a_configured_budget_under_the_smallest_candidate_is_kept(device):
    fake = device(overhead=1e-3, per_token=1e-7)
    assert gpu_budget(fake.launch, max_batch_tokens=512).max_batch_tokens == 512


def test_a_large_models_gpu_budget_has_a_smaller_express_one(device):
    """Batches of tens of milliseconds at the chosen budget: the express budget is the largest size timed
    whose batch takes at most EXPRESS_BATCH_SECONDS (a batch of 1024 here takes 2.7 ms, of 2048 5.2 ms)."""
    per_token = 2.5e-6
    fake = device(overhead=128 * per_token, per_token=per_token)
    choice = gpu_budget(fake.launch, max_batch_tokens=16384)
    assert choice.max_batch_tokens == 4096
    seconds = {n: n / speed for n, speed in choice.speeds}
    assert seconds[1024] <= batch_budget.EXPRESS_BATCH_SECONDS < seconds[2048]
    assert choice.express_tokens == 1024


def test_a_small_models_express_budget_is_its_budget(device):
    per_token = 1e-7
    fake = device(overhead=128 * per_token, per_token=per_token)
    choice = gpu_budget(fake.launch, max_batch_tokens=16384)
    assert choice.express_tokens == choice.max_batch_tokens == 4096
