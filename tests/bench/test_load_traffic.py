"""The load generator's plan and response decoding (bench/lib/traffic.py, bench/lib/profile_summary.py)."""

from __future__ import annotations

import base64

import msgspec
import numpy as np

from bench.lib.profile_summary import summarize
from bench.lib.traffic import WorkerResult, decode_body, make_plan, steady_window


def test_plan_covers_every_text_once_in_requests_of_1_to_64():
    plan = make_plan(1000, 64, seed=3, formats=("float", "base64"))
    assert plan[0].lo == 0 and plan[-1].hi == 1000
    assert all(a.hi == b.lo for a, b in zip(plan, plan[1:]))
    sizes = [r.hi - r.lo for r in plan[:-1]]  # the last one is cut at the end of the texts
    assert min(sizes) >= 1 and max(sizes) <= 64 and len(set(sizes)) > 10
    assert {r.encoding_format for r in plan} == {"float", "base64"}


def test_plan_is_fixed_by_its_seed():
    assert make_plan(500, 64, 7, ("float", "base64")) == make_plan(500, 64, 7, ("float", "base64"))
    assert make_plan(500, 64, 7, ("float", "base64")) != make_plan(500, 64, 8, ("float", "base64"))


def test_decode_body_reads_both_formats_exactly():
    vectors = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
    body = msgspec.json.encode({"data": [
        {"index": 0, "embedding": vectors[0].tolist(), "object": "embedding"},
        {"index": 1, "embedding": base64.b64encode(vectors[1].tobytes()).decode(), "object": "embedding"},
    ], "model": "m", "usage": {"prompt_tokens": 1, "total_tokens": 1}, "object": "list"})
    decoded = decode_body(body)
    assert [i for i, _ in decoded] == [0, 1]
    assert all(np.array_equal(v, w) and v.dtype == np.float32 for (_, v), w in zip(decoded, vectors))


def test_profile_summary_shares(tmp_path):
    raw = tmp_path / "p.txt"
    raw.write_text(
        "thread (1): MainThread;run (a.py:1);encode (b.py:2) 3\n"
        "thread (2): rose-engine_0;run (a.py:1);forward (c.py:9) 1\n"
    )
    text = "\n".join(summarize(raw))
    assert "| thread (1): MainThread | 75.0% |" in text
    assert "| encode (b.py) | 75.0% |" in text  # self share
    assert "| run (a.py) | 100.0% |" in text  # inclusive share


def test_profile_summary_per_process(tmp_path):
    # py-spy --subprocesses: a child's stack is led by its ancestors' process frames, and a
    # spawned child's command line holds a ';'.
    child = 'process 7:"python -c from multiprocessing.spawn import spawn_main; spawn_main()"'
    raw = tmp_path / "p.txt"
    raw.write_text(
        'process 5:"python -m rose_embed serve";thread (5): MainThread;run (a.py:1) 1\n'
        f'process 5:"python -m rose_embed serve";{child};thread (7): rose-engine_0;forward (c.py:9) 3\n'
    )
    text = "\n".join(summarize(raw))
    assert "| process 7 | 75.0% |" in text and "| process 5 | 25.0% |" in text
    assert "| process 7 thread (7): rose-engine_0 | 75.0% |" in text
    assert "| forward (c.py) | 75.0% |" in text and "spawn_main()" not in text


def _worker(ramped_up, last_taken, answered, latency=0.1):
    return WorkerResult(100.0, max(at for *_, at in answered), [latency], answered, ramped_up, last_taken,
                        np.zeros(0, np.int64), np.zeros((0, 0), np.float32), [], 0.0)


def test_steady_window_opens_once_every_client_is_answered_and_closes_when_a_process_runs_out():
    token_prefix = np.arange(0, 101) * 10  # every text is 10 tokens
    results = [
        _worker(101.0, 104.0, [(0, 5, 101.0), (5, 10, 103.5), (10, 12, 104.5)]),
        _worker(102.0, 105.0, [(20, 30, 102.0), (30, 31, 104.0), (31, 40, 105.5)]),
    ]
    seconds, tokens = steady_window(results, token_prefix)
    assert seconds == 2.0  # from the last first answer (102) to the first process's last send (104)
    assert tokens == (5 + 1) * 10  # answered in (102, 104]: texts 5:10 and 30:31


def test_a_round_too_short_for_a_steady_window_has_none():
    results = [_worker(103.0, 102.5, [(0, 5, 103.0)]), _worker(101.0, 104.0, [(5, 9, 101.0)])]
    assert steady_window(results, np.arange(0, 11)) == (0.0, 0)


def test_a_window_of_few_request_latencies_is_not_steady():
    results = [_worker(101.0, 104.0, [(0, 5, 102.0)], latency=0.5)]
    assert steady_window(results, np.arange(0, 11), min_latencies=10)[0] == 0.0  # 3 s < 10 x 0.5 s
    assert steady_window(results, np.arange(0, 11), min_latencies=5)[0] == 3.0
