"""The load generator's plan and response decoding (bench/lib/traffic.py, bench/lib/profile_summary.py)."""

from __future__ import annotations

import base64

import msgspec
import numpy as np
from rose_embed.compat.multi_output_wire import multi_output_item
from rose_embed.compat.multi_vector_wire import multi_vector
from rose_embed.compat.sparse_wire import sparse_embedding, tei_pairs

from bench.lib.profile_summary import summarize
from bench.lib.traffic import (
    ANSWERS,
    Route,
    WorkerResult,
    decode_body,
    decode_multi_output,
    decode_multi_vector,
    decode_tei_sparse,
    encode_plan,
    make_plan,
    steady_window,
)


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


def test_other_routes_bodies_and_answers_read_back_exactly():
    """The heads' routes (bench/heads.py's HTTP arm): bodies with their own fields, answers written by the
    server's own encoders read back exactly."""
    plan = make_plan(3, 64, 0, ("base64",))
    route = Route(path="/embed_sparse", input_field="inputs", fields=(("truncate", True),), answer="tei_sparse",
                  has_formats=False)
    [(_, body)] = encode_plan(["a", "b", "c"], plan, None, route)
    assert msgspec.json.decode(body) == {"inputs": ["a", "b", "c"], "truncate": True}
    outputs = Route(fields=(("outputs", ("dense", "sparse", "colbert")),), answer="multi_output")
    assert msgspec.json.decode(encode_plan(["a"], make_plan(1, 1, 0, ("float",)), "m", outputs)[0][1]) == {
        "input": ["a"], "outputs": ["dense", "sparse", "colbert"], "encoding_format": "float", "model": "m"}
    assert set(ANSWERS) == {"tei_sparse", "multi_vector", "multi_output"}

    rng = np.random.default_rng(0)
    ids, weights = np.array([2, 7, 30000]), np.array([0.5, 1.25, 3.0e-3], np.float32)
    tokens = [rng.standard_normal((n, 4)).astype(np.float32) for n in (3, 0)]
    [(i, (got_ids, got_weights))] = decode_tei_sparse(msgspec.json.encode([tei_pairs(ids, weights)]))
    assert i == 0 and np.array_equal(got_ids, ids) and np.array_equal(got_weights, weights)
    body = msgspec.json.encode({"data": [{"index": i, "object": "multi_vector_embedding",
                                          "embedding": multi_vector(v, fmt)}
                                         for i, (v, fmt) in enumerate(zip(tokens * 2, ["float", "float", "base64",
                                                                                       "base64"]))]})
    decoded = decode_multi_vector(body, 4)
    assert [v.shape for _, v in decoded] == [(3, 4), (0, 4)] * 2
    assert all(np.array_equal(v, w) for (_, v), w in zip(decoded, tokens * 2))
    dense = rng.standard_normal(6).astype(np.float32)
    for fmt, dense_wire in (("float", dense.tolist()), ("base64", base64.b64encode(dense.tobytes()).decode())):
        item = multi_output_item(0, {"dense": dense_wire, "sparse": sparse_embedding(ids, weights),
                                     "colbert": multi_vector(tokens[0], fmt)})
        [(_, (got_dense, (got_ids, got_weights), got_tokens))] = decode_multi_output(
            msgspec.json.encode({"data": [item]}), 4)
        assert np.array_equal(got_dense, dense) and np.array_equal(got_tokens, tokens[0])
        assert np.array_equal(got_ids, ids) and np.array_equal(got_weights, weights)


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
