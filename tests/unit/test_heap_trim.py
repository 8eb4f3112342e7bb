"""engine/contract/memory.py: the heap is trimmed only when the resident set has grown past its
level over the first batches, at most once per interval, off the caller's thread; freed
megabytes are kept for the next large request."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from rose_embed.engine.contract.memory import HeapTrimmer, resident_bytes


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


_LARGE_REQUESTS = """
import resource, sys
from rose_embed.engine.contract.memory import keep_freed_memory
if sys.argv[1] == "keep" and not keep_freed_memory():
    print("no-glibc")
    raise SystemExit

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

def large_request():  # what a front end holds for a large request: vectors, encoded parts, the body
    parts = [b"v" * (800 << 10) for _ in range(4)] + [b"e" * (1 << 20) for _ in range(4)]
    body = b"".join(parts)
    del parts, body

for _ in range(3):
    large_request()
before = faults()
for _ in range(10):
    large_request()
print((faults() - before) / 10)
"""


@pytest.mark.parametrize("mode", ["keep", "defaults"])
def test_kept_memory_serves_the_next_large_request_without_faulting_pages_in(mode):
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", _LARGE_REQUESTS, mode], cwd=repo, capture_output=True, text=True,
                         check=True).stdout.strip()
    if out == "no-glibc":
        pytest.skip("not glibc: no mallopt")
    faults_per_request = float(out)
    if mode == "keep":
        assert faults_per_request < 50
    else:  # the control (glibc's defaults, as CI has them): the megabytes go back and fault in again
        assert faults_per_request > 1000
