"""Request ids, timing headers, /metrics, the per-request log line, limits and CORS (fake engine, in process).

What only a real process shows (uvicorn's own log lines, a body refused by its declared
length before it is read, an engine process's memory) is in test_observability_server.py.
"""

from __future__ import annotations

import json
import logging
import re
import uuid

import numpy as np
import pytest

from rose_embed.server.http.logs import ACCESS_LOGGER, JsonFormatter, TextFormatter
from tests.support.fake_engine import FAKE_MODEL, FakeEngine, fake_config, observed_app, serve, serve_app
from tests.support.helpers import assert_envelope, sample

ORIGIN = "https://app.example"
DELAY = 0.005  # seconds per batch on the fake, so that inference time is measurable


@pytest.fixture(scope="module")
def fake() -> FakeEngine:
    return FakeEngine(delay=DELAY)


@pytest.fixture(scope="module")
def configured(fake):
    """Inputs in the log, CORS for one origin, tight per-request limits."""
    config = fake_config(log_inputs=True, cors_origins=(ORIGIN,), max_input_chars=1000, max_request_inputs=16,
                         max_body_bytes=200_000)
    with serve(fake, config) as client:
        yield client


def embed(client, body: dict, **kwargs):
    return client.post("/v1/embeddings", json={"model": FAKE_MODEL, **body}, **kwargs)


def test_request_id_is_echoed_when_plain_and_made_otherwise(client):
    r = embed(client, {"input": "hi"}, headers={"x-request-id": "client-42.a:b"})
    assert r.headers["x-request-id"] == "client-42.a:b"
    made = embed(client, {"input": "hi"}).headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", made)
    hostile = embed(client, {"input": "hi"}, headers={"x-request-id": "a b<script>" + "x" * 300})
    assert re.fullmatch(r"[0-9a-f]{32}", hostile.headers["x-request-id"])
    for r in (client.get("/nowhere"), embed(client, {})):
        assert re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"])


def test_timing_headers(client):
    r = embed(client, {"input": ["timing", "headers"]})
    assert r.status_code == 200
    phases = ("preparation", "queue", "tokenization", "inference", "answer", "total")
    times = {k: float(r.headers[f"x-{k}-time-ms"]) for k in phases}
    assert all(v >= 0 for v in times.values())
    assert times["inference"] >= DELAY * 1000  # the fake's batch took at least its delay
    # The phases that follow one another fit in the total (each header is rounded to 0.1 ms).
    in_turn = times["preparation"] + times["queue"] + times["inference"] + times["answer"]
    assert in_turn <= times["total"] + 0.2
    health = client.get("/health")
    assert "x-total-time-ms" in health.headers and "x-inference-time-ms" not in health.headers


def test_metrics_content(client, fake):
    def scrape() -> str:
        response = client.get("/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/plain; version=1.0.0; charset=utf-8"  # one charset
        return response.text

    before = scrape()
    r = embed(client, {"input": ["metrics one", "metrics two", "metrics three"]})
    assert r.status_code == 200
    client.get(f"/no/such/{uuid.uuid4().hex}")
    text = scrape()

    def grew(name: str) -> float:
        return sample(text, name) - sample(before, name)

    assert grew(f'rose_requests_total{{model="{FAKE_MODEL}",route="/v1/embeddings",status="200"}}') == 1
    assert grew("rose_tokens_total") == r.json()["usage"]["prompt_tokens"]
    assert grew("rose_sequences_total") == 3
    assert sample(text, 'rose_requests_total{model="",route="other",status="404"}') >= 1  # no model picked
    assert "/no/such" not in text  # unknown paths share one label
    for phase in ("preparation", "queue", "tokenization", "inference", "answer", "total"):
        assert sample(text, f'rose_request_phase_seconds_count{{model="{FAKE_MODEL}",phase="{phase}"}}') >= 1
    # Every batch the engine ran is observed once; the fake counts the warm-up's batch too.
    assert sample(text, "rose_batch_sequences_count") == sample(text, "rose_batch_tokens_count") == len(fake.batches)
    assert sample(text, "rose_eager_runs_total") == fake.num_eager_runs == len(fake.batches) + 1
    for name in ("rose_queue_tokens", "rose_queue_pieces", "rose_tokens_per_second", "rose_graph_replays_total",
                 "rose_graph_capture_failures_total", "rose_pieces_cancelled_total", "rose_batches_failed_total"):
        assert re.search(rf"^{name} \d", text, re.M), name
    assert sample(text, "rose_ready") == 1 and sample(text, "rose_engine_up") == 1
    assert sample(text, 'rose_engine_serving{device="cpu",engine="0"}') == 1
    assert sample(text, "rose_graph_replays_total") == 0
    assert sample(text, 'rose_device_memory_bytes{device="cpu",engine="0",kind="resident"}') > 10e6
    assert sample(text, "process_resident_memory_bytes") > 10e6


def _access_records(caplog, request_id: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == ACCESS_LOGGER and r.fields.get("request_id") == request_id]


def test_log_line_per_request_without_input_text(client, caplog):
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    secret = f"private-{uuid.uuid4().hex}"
    r = embed(client, {"input": [secret, "other"]}, headers={"x-request-id": "log-check-1"})
    assert r.status_code == 200
    records = _access_records(caplog, "log-check-1")
    assert len(records) == 1
    line = TextFormatter().format(records[0])
    assert "POST /v1/embeddings 200" in line
    for field in ("status=200", "inputs=2", f"tokens={r.json()['usage']['prompt_tokens']}", "total_ms=",
                  "inference_ms=", "bytes_in=", "bytes_out="):
        assert field in line, field
    assert secret not in line and secret not in caplog.text


def test_probes_log_below_info(client, caplog):
    caplog.set_level(logging.DEBUG, logger=ACCESS_LOGGER)
    client.get("/health", headers={"x-request-id": "probe-1"})
    client.get("/metrics", headers={"x-request-id": "probe-2"})
    assert [r.levelno for r in _access_records(caplog, "probe-1") + _access_records(caplog, "probe-2")] == [
        logging.DEBUG, logging.DEBUG]


def test_a_503_from_health_while_loading_logs_below_info_too(fake, caplog):
    caplog.set_level(logging.DEBUG, logger=ACCESS_LOGGER)
    with serve_app(observed_app(fake)) as client:  # once loaded: the load would set it ready again
        client.runtime.is_ready = False  # as while the model loads
        r = client.get("/health", headers={"x-request-id": "probe-3"})
    assert r.status_code == 503 and r.json()["error"]["code"] == "model_not_ready"
    assert [r.levelno for r in _access_records(caplog, "probe-3")] == [logging.DEBUG]


def test_json_log_line_with_log_inputs(configured, caplog):
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    text = f"logged-{uuid.uuid4().hex}"
    assert embed(configured, {"input": [text]}, headers={"x-request-id": "json-check-1"}).status_code == 200
    (record,) = _access_records(caplog, "json-check-1")
    entry = json.loads(JsonFormatter().format(record))
    assert entry["logger"] == ACCESS_LOGGER and entry["message"] == "POST /v1/embeddings 200"
    assert entry["status"] == 200 and entry["inputs"] == 1 and entry["tokens"] > 2
    assert entry["total_ms"] >= entry["inference_ms"] > 0
    assert entry["inputs_text"] == [text]  # --log-inputs


def test_cors_is_off_unless_configured(client, configured):
    preflight = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}
    assert "access-control-allow-origin" not in client.options("/v1/embeddings", headers=preflight).headers
    assert "access-control-allow-origin" not in embed(client, {"input": "x"}, headers={"Origin": ORIGIN}).headers
    assert configured.options("/v1/embeddings", headers=preflight).headers.get("access-control-allow-origin") == ORIGIN
    assert embed(configured, {"input": "x"}, headers={"Origin": ORIGIN}).headers.get(
        "access-control-allow-origin") == ORIGIN
    evil = configured.options("/v1/embeddings", headers={**preflight, "Origin": "https://evil.example"})
    assert evil.headers.get("access-control-allow-origin") != "https://evil.example"


def test_body_over_max_body_bytes_gets_413(configured):
    r = configured.post("/v1/embeddings", content=b'{"input": "' + b"a" * 250_000 + b'"}',
                        headers={"content-type": "application/json"})
    error = assert_envelope(r, 413, "request_too_large")
    assert error["type"] == "invalid_request_error"


def test_a_long_string_is_refused_before_tokenizing(configured, fake, monkeypatch):
    tokenized: list[int] = []
    real = fake.tokenize
    monkeypatch.setattr(fake, "tokenize", lambda texts: tokenized.extend(map(len, texts)) or real(texts))
    error = assert_envelope(embed(configured, {"input": ["fine", "a" * 100_000]}), 400, "input_too_long")
    assert error["param"] == "input" and "input[1]" in error["message"]
    assert tokenized == []  # refused by its length: the tokenizer never read it
    r = embed(configured, {"input": "a" * 1000, "encoding_format": "float"})
    assert tokenized == [1000]
    np.testing.assert_allclose(r.json()["data"][0]["embedding"], fake.embed(["a" * 1000])[0], atol=1e-6, rtol=0)


def test_inputs_per_request_limit(configured):
    error = assert_envelope(embed(configured, {"input": ["x"] * 17}), 400)
    assert error["param"] == "input" and "at most 16" in error["message"]
    assert embed(configured, {"input": ["x"] * 16}).status_code == 200
