"""The mixed soak judges what it should: each process against its own baseline, and each answer
against the one its request must get (bench/lib/process_memory.py, bench/lib/soak_mix.py)."""

from __future__ import annotations

import base64
import json
import random
import subprocess

import numpy as np

from bench.lib.process_memory import Track, judge, memory_of, roles
from bench.lib.soak_mix import MIX, Request, make_texts, pick, problem

MIB = 2**20


def track(levels: list[tuple[float, int]]) -> Track:
    return Track("engine 0 (cpu)", 1, [(t, {"rss": mib * MIB, "anon": mib * MIB}) for t, mib in levels])


def test_a_process_is_judged_against_its_level_after_the_warmup():
    # Grows fast in the first minute (not judged), then within 15 % of its level after it.
    held = judge(track([(5, 100), (30, 400), (61, 500), (65, 520), (200, 590), (590, 560), (605, 300)]),
                 warmup=60, window=10, load_end=600, tolerance=0.15)
    assert (held.baseline, held.peak, held.final, held.idle) == (520 * MIB, 590 * MIB, 560 * MIB, 300 * MIB)
    assert held.passed and abs(held.growth - (590 / 520 - 1)) < 1e-9
    grown = judge(track([(61, 500), (65, 520), (300, 600)]), warmup=60, window=10, load_end=600, tolerance=0.15)
    assert not grown.passed  # +15.4 %


def test_samples_after_the_load_are_not_its_peak():
    verdict = judge(track([(61, 500), (100, 510), (601, 900)]), warmup=60, window=10, load_end=600, tolerance=0.15)
    assert verdict.peak == 510 * MIB and verdict.idle == 900 * MIB


def test_a_process_without_a_baseline_sample_is_not_judged():
    assert judge(track([(5, 100), (500, 100)]), warmup=60, window=10, load_end=600, tolerance=0.15) is None


def test_roles_name_the_supervisor_front_ends_and_engines():
    # A process of no children of its own (a test worker may have some): only the supervisor is found.
    child = subprocess.Popen(["sleep", "30"])
    try:
        pid = child.pid
        assert roles(pid, {"engines": [{"index": 0, "device": "cpu", "pid": 999_999_999}]}) == {
            pid: "supervisor + front end"}
        assert roles(pid, {"frontends": [{"index": 0, "pid": 1}], "engines": []}) == {pid: "supervisor"}
        assert memory_of(pid)["rss"] > 0 and memory_of(999_999_999) is None
    finally:
        child.kill()
        child.wait()


def _embeddings(num: int, width: int, encoding: str) -> bytes:
    rows = np.ones((num, width), np.float32)
    data = [{"embedding": base64.b64encode(row.tobytes()).decode() if encoding == "base64" else row.tolist(),
             "index": i} for i, row in enumerate(rows)]
    return json.dumps({"data": data}).encode()


def test_a_good_answer_must_hold_one_vector_of_the_width_per_input():
    request = Request("openai", "/v1/embeddings", b"", 200, 3, True)
    assert problem(request, 200, _embeddings(3, 384, "float"), 384) is None
    assert problem(request, 200, _embeddings(3, 384, "base64"), 384) is None
    assert "2 answers" in problem(request, 200, _embeddings(2, 384, "float"), 384)
    assert "widths" in problem(request, 200, _embeddings(3, 383, "base64"), 384)
    assert "status 429" in problem(request, 429, b"{}", 384)


def test_a_bad_request_must_get_its_status_in_the_envelope():
    request = Request("bad", "/v1/embeddings", b"{", 400, 0, False)
    assert problem(request, 400, b'{"error": {"message": "no"}}', 384) is None
    assert problem(request, 400, b"Invalid HTTP request received.", 384).startswith("not JSON")
    assert "expected 400" in problem(request, 500, b"{}", 384)


def test_the_rerank_and_tei_answers_are_counted():
    rerank = Request("rerank", "/v1/rerank", b"", 200, 2, True)
    results = [{"index": 1, "relevance_score": 0.5}, {"index": 0, "relevance_score": 0.1}]
    assert problem(rerank, 200, json.dumps({"results": results}).encode(), 384) is None
    assert problem(rerank, 200, json.dumps({"results": results[:1]}).encode(), 384) is not None
    tei = Request("tei", "/embed", b"", 200, 2, True)
    assert problem(tei, 200, json.dumps([[0.0] * 4, [0.0] * 4]).encode(), 4) is None


def test_the_mix_sends_every_kind_and_valid_json_for_the_good_ones():
    texts = make_texts([f"paragraph {i} with some words" for i in range(50)])
    rng = random.Random(0)
    seen = {}
    for _ in range(3000):
        request = pick(rng, texts)
        seen[request.kind] = request
    assert len(seen) == len(MIX)
    for request in seen.values():
        if request.is_good:
            json.loads(request.body)
    assert all(len(text) > 2000 for text in texts.long)  # past any default model's limit
