"""/metrics and /health for the whole server (server/metrics/stats_board.py), in process on the fake engine.

Each app here plays one front end of `--frontend-workers`, all reporting to one board
directory; a scrape of either answers for both with the front ends' figures (requests and
their phases, each model's apart). Unlike real front ends, each app here has an engine of its own (in a thread),
and the engines' figures are read off the answering front end's engine board, never added
up over the reports. test_front_ends.py checks the whole across real front-end processes
that share one engine.
"""

from __future__ import annotations

import os
import subprocess
import time
from contextlib import contextmanager

import pytest

from rose_embed.server.metrics.stats_board import Family, Report, StatsBoard
from tests.support.fake_engine import FAKE_MODEL, FakeEngine, fake_config, observed_app, serve, serve_app
from tests.support.fake_reranker import FAKE_RERANKER, FakeReranker
from tests.support.helpers import sample

EMBEDDINGS_200 = f'rose_requests_total{{model="{FAKE_MODEL}",route="/v1/embeddings",status="200"}}'
TOTAL_COUNT = f'rose_request_phase_seconds_count{{model="{FAKE_MODEL}",phase="total"}}'
RERANK_200 = f'rose_requests_total{{model="{FAKE_RERANKER}",route="/v1/rerank",status="200"}}'


@pytest.fixture(autouse=True)
def quick_reports(monkeypatch):
    """Front ends report every 50 ms here instead of every half second: the tests wait for reports."""
    monkeypatch.setattr("rose_embed.server.metrics.prometheus.PUBLISH_EVERY_S", 0.05)


@contextmanager
def front_end(board_dir, index: int, with_reranker: bool = False):
    """One front end's app (its own fake engine: each app drives its own engine thread), serving the
    fake embedder, and the fake reranker beside it `with_reranker`."""
    engines = [FakeEngine(), FakeReranker()] if with_reranker else FakeEngine()
    app = observed_app(engines, fake_config(frontend_workers=3, worker_index=index, stats_dir=str(board_dir)))
    with serve_app(app) as client:
        yield client


def embed(client, count: int) -> int:
    """`count` requests of two inputs; the tokens they took."""
    tokens = 0
    for i in range(count):
        r = client.post("/v1/embeddings", json={"model": FAKE_MODEL, "input": [f"text {i}", f"other text {i}"]})
        assert r.status_code == 200, r.text
        tokens += r.json()["usage"]["prompt_tokens"]
    return tokens


def rerank(client, count: int) -> int:
    """`count` requests of three documents to the reranker; the tokens they took."""
    tokens = 0
    for i in range(count):
        r = client.post("/v1/rerank", json={"model": FAKE_RERANKER, "query": f"query {i}",
                                            "documents": ["one", "two", f"three {i}"]})
        assert r.status_code == 200, r.text
        tokens += r.json()["usage"]["total_tokens"]
    return tokens


def scrape(client) -> str:
    r = client.get("/metrics")
    assert r.status_code == 200
    return r.text


def wait_for(client, name: str, value: float) -> str:
    """A scrape once the other front ends have reported `value` (they report every 50 ms here)."""
    deadline = time.monotonic() + 5
    while sample(text := scrape(client), name) != value and time.monotonic() < deadline:
        time.sleep(0.05)
    return text


def own_engine(client) -> dict[str, float]:
    """The board of the front end's own engine."""
    return client.runtime.engines.links[0].board_snapshot()


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_either_front_end_answers_for_both(tmp_path):
    with front_end(tmp_path, 0) as a, front_end(tmp_path, 1) as b:
        tokens_a, tokens_b = embed(a, 3), embed(b, 2)
        for client, tokens, inputs in ((b, tokens_b, 4), (a, tokens_a, 6)):
            text = wait_for(client, EMBEDDINGS_200, 5)
            assert sample(text, EMBEDDINGS_200) == 5  # not one front end's share
            assert sample(text, "rose_tokens_total") == tokens  # its engine's, counted once
            assert sample(text, "rose_sequences_total") == inputs
            assert sample(text, TOTAL_COUNT) >= 5
            assert sample(text, f'rose_request_phase_seconds_bucket{{le="+Inf",model="{FAKE_MODEL}",phase="total"}}') \
                == sample(text, TOTAL_COUNT)
            batches = own_engine(client)["batches"]
            assert batches >= 1
            assert sample(text, 'rose_engine_batches_total{device="cpu",engine="0"}') == batches
            assert sample(text, "rose_batch_tokens_count") == batches
            assert sample(text, "rose_ready") == 1 and sample(text, 'rose_engine_serving{device="cpu",engine="0"}') == 1
            for index in ("0", "1"):
                assert sample(text, f'rose_frontend_ready{{frontend="{index}"}}') == 1
                assert sample(text, f'process_resident_memory_bytes{{frontend="{index}"}}') > 10e6
            assert "rose_frontend_worker" not in text
            health = client.get("/health")
            assert health.status_code == 200
            body = health.json()
            assert body["status"] == "ok"
            assert [(f["index"], f["state"], f["restarts"]) for f in body["frontends"]] == [
                (0, "serving", 0), (1, "serving", 0)]
            assert all(f["last_seen_s"] < 2 for f in body["frontends"])
            (engine,) = body["engines"]
            assert engine["state"] == "serving" and engine["tokens"] in (tokens_a, tokens_b)


def test_each_models_counts_add_up_over_the_front_ends_apart(tmp_path):
    """Two models on two front ends: each model's series sums both front ends' requests, and never
    takes in the other model's."""
    with front_end(tmp_path, 0, with_reranker=True) as a, front_end(tmp_path, 1, with_reranker=True) as b:
        embedded = embed(a, 2)
        assert b.post("/v1/embeddings", json={"input": "a", "model": "nope"}).status_code == 404
        embedded += embed(b, 1)
        reranked = rerank(a, 1) + rerank(b, 3)  # each front end's last request: its report holds them all
        for client in (a, b):
            text = wait_for(client, RERANK_200, 4)
            assert sample(text, EMBEDDINGS_200) == 3
            assert sample(text, 'rose_requests_total{model="",route="/v1/embeddings",status="404"}') == 1
            assert sample(text, TOTAL_COUNT) == 3
            assert sample(text, f'rose_request_phase_seconds_count{{model="{FAKE_RERANKER}",phase="total"}}') == 4
            assert sample(text, f'rose_request_phase_seconds_bucket{{le="+Inf",model="{FAKE_RERANKER}",'
                                'phase="total"}') == 4
            assert sample(text, f'rose_request_inputs_total{{model="{FAKE_MODEL}"}}') == 6
            assert sample(text, f'rose_request_inputs_total{{model="{FAKE_RERANKER}"}}') == 12
            assert sample(text, f'rose_request_tokens_total{{model="{FAKE_MODEL}"}}') == embedded
            assert sample(text, f'rose_request_tokens_total{{model="{FAKE_RERANKER}"}}') == reranked
            assert f'rose_requests_total{{model="{FAKE_MODEL}",route="/v1/rerank"' not in text
            assert 'frontend="' not in "".join(line for line in text.splitlines() if line.startswith("rose_request"))


def test_a_front_end_started_in_place_of_another_carries_its_counts(tmp_path):
    with front_end(tmp_path, 0) as a:
        with front_end(tmp_path, 1) as b:
            tokens = embed(a, 1)
            embed(b, 2)
            wait_for(a, EMBEDDINGS_200, 3)
        # Stopped: its last report still counts.
        assert sample(scrape(a), EMBEDDINGS_200) == 3 and sample(scrape(a), "rose_tokens_total") == tokens
        stopped = {f["index"]: f["state"] for f in a.get("/health").json()["frontends"]}
        assert stopped == {0: "serving", 1: "stopping"}
        with front_end(tmp_path, 1) as b:
            text = scrape(a)
            assert sample(text, EMBEDDINGS_200) == 3  # its predecessor's counts, not 0 + a's
            embed(b, 1)
            text = wait_for(a, EMBEDDINGS_200, 4)
            assert sample(text, EMBEDDINGS_200) == 4 and sample(text, "rose_tokens_total") == tokens
            assert sample(scrape(b), EMBEDDINGS_200) == 4
            body = b.get("/health").json()
            assert [(f["index"], f["state"], f["restarts"]) for f in body["frontends"]] == [
                (0, "serving", 0), (1, "serving", 1)]


def test_a_dead_front_ends_report_is_marked_and_its_counts_kept(tmp_path):
    gone = Report(index=2, pid=dead_pid(), updated=time.time(), ready=True, was_ready=True, problem=None, restarts=0,
                  engines=[{"index": 0, "device": "cpu", "pid": 1, "state": "serving", "batches": 9, "tokens": 900,
                            "queued_tokens": 100, "pieces_sent": 50}],
                  families=[Family("rose_requests", "counter", "HTTP requests", "",
                                   [("rose_requests_total", {"route": "/v1/embeddings", "status": "200",
                                                           "model": FAKE_MODEL}, 7.0)]),
                            Family("rose_queue_tokens", "gauge", "Tokens waiting", "",
                                   [("rose_queue_tokens", {}, 1e6)])])
    StatsBoard(str(tmp_path), 2).publish(gone)
    with front_end(tmp_path, 0) as a:
        embed(a, 2)
        text = scrape(a)
        assert sample(text, EMBEDDINGS_200) == 9  # a counter keeps what the dead one counted
        assert sample(text, "rose_queue_tokens") == 0  # a gauge of the present does not
        assert sample(text, 'rose_frontend_ready{frontend="0"}') == 1
        assert sample(text, 'rose_frontend_ready{frontend="2"}') == 0
        health = a.get("/health")
        assert health.status_code == 200  # one front end and one engine serve
        body = health.json()
        assert body["status"] == "degraded"
        assert [(f["index"], f["state"], f.get("reason")) for f in body["frontends"]] == [
            (0, "serving", None), (2, "out", "its process is gone")]
        assert body["engines"][0]["pieces_sent"] == 2  # the dead one's view of the engine is not used


def test_a_stopping_front_ends_view_of_the_engines_is_not_used(tmp_path):
    """A front end that stops takes the engines out of its own rotation; they still serve the others."""
    stopping = Report(index=1, pid=os.getpid(), updated=time.time(), ready=False, was_ready=True, problem=None,
                      restarts=0, engines=[{"index": 0, "device": "cpu", "pid": 1, "state": "out", "reason": "stopped",
                                            "batches": 0, "tokens": 0, "queued_tokens": 0, "pieces_sent": 0}],
                      families=[Family("rose_engine_serving", "gauge", "In rotation", "",
                                       [("rose_engine_serving", {"engine": "0", "device": "cpu"}, 0.0)])])
    StatsBoard(str(tmp_path), 1).publish(stopping)
    with front_end(tmp_path, 0) as a:
        assert sample(scrape(a), 'rose_engine_serving{device="cpu",engine="0"}') == 1
        body = a.get("/health").json()
        assert body["status"] == "degraded" and body["engines"][0]["state"] == "serving"
        assert [(f["index"], f["state"]) for f in body["frontends"]] == [(0, "serving"), (1, "stopping")]


def test_health_is_503_while_no_front_end_can_serve(tmp_path):
    with front_end(tmp_path, 0) as a:
        runtime = a.runtime
        runtime.is_ready = False  # as while it loads
        try:
            r = a.get("/health")
            assert r.status_code == 503 and r.json()["error"]["code"] == "model_not_ready"
            assert sample(scrape(a), "rose_ready") == 0
        finally:
            runtime.is_ready = True
        assert a.get("/health").status_code == 200


@pytest.mark.parametrize("config", [fake_config(), fake_config(frontend_workers=1)])
def test_one_front_end_reports_nothing_of_front_ends(config):
    """Without a board (one front end) /metrics is what it always was."""
    with serve(FakeEngine(), config) as client:
        embed(client, 1)
        text = scrape(client)
        assert sample(text, EMBEDDINGS_200) == 1
        assert "rose_frontend" not in text and 'frontend="' not in text
        body = client.get("/health").json()
        assert body["status"] == "ok" and "frontends" not in body
        assert [(e["index"], e["state"]) for e in body["engines"]] == [(0, "serving")]
