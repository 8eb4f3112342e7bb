"""Request ids, timing headers, /metrics, the per-request log line, limits and CORS."""

from __future__ import annotations

import json
import re
import time
import uuid

import httpx
import pytest

from tests.conftest import ServerProcess
from tests.helpers import MODEL, assert_envelope, embed, metric, raw_post

ORIGIN = "https://app.example"


@pytest.fixture(scope="module")
def configured():
    """JSON logs with inputs, CORS for one origin, tight per-request limits, a roomy body limit."""
    proc = ServerProcess("--max-batch-tokens", "1024", "--log-format", "json", "--log-inputs",
                         "--cors-origin", ORIGIN, "--max-input-chars", "1000", "--max-request-inputs", "16",
                         "--max-body-bytes", "120000000")
    yield proc
    proc.stop()


def test_request_id_is_echoed_when_plain_and_made_otherwise(server):
    r = embed(server.url, {"input": "hi", "model": MODEL}, headers={"x-request-id": "client-42.a:b"})
    assert r.headers["x-request-id"] == "client-42.a:b"
    made = embed(server.url, {"input": "hi", "model": MODEL}).headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", made)
    hostile = embed(server.url, {"input": "hi", "model": MODEL}, headers={"x-request-id": "a b<script>" + "x" * 300})
    assert re.fullmatch(r"[0-9a-f]{32}", hostile.headers["x-request-id"])
    for r in (httpx.get(server.url + "/nowhere", timeout=10), embed(server.url, {"model": MODEL})):
        assert re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"])


def test_timing_headers(server):
    r = embed(server.url, {"input": ["timing", "headers"], "model": MODEL})
    assert r.status_code == 200
    times = {k: float(r.headers[f"x-{k}-time-ms"]) for k in ("queue", "tokenization", "inference", "total")}
    assert all(v >= 0 for v in times.values())
    assert times["inference"] > 0
    assert times["total"] >= times["inference"] + times["queue"]
    health = httpx.get(server.url + "/health", timeout=10)
    assert "x-total-time-ms" in health.headers and "x-inference-time-ms" not in health.headers


def test_metrics_content(server):
    before = metric(server.url, 'rose_requests_total{route="/v1/embeddings",status="200"}')
    tokens_before = metric(server.url, "rose_tokens_total")
    r = embed(server.url, {"input": ["metrics one", "metrics two", "metrics three"], "model": MODEL})
    assert r.status_code == 200
    httpx.get(server.url + f"/no/such/{uuid.uuid4().hex}", timeout=10)
    response = httpx.get(server.url + "/metrics", timeout=10)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert metric(server.url, 'rose_requests_total{route="/v1/embeddings",status="200"}') == before + 1
    assert metric(server.url, "rose_tokens_total") - tokens_before == r.json()["usage"]["prompt_tokens"]
    assert metric(server.url, 'rose_requests_total{route="other",status="404"}') >= 1
    assert "/no/such" not in text  # unknown paths share one label
    for phase in ("queue", "tokenization", "inference", "total"):
        assert metric(server.url, f'rose_request_phase_seconds_count{{phase="{phase}"}}') >= 1
    for name in ("rose_batch_tokens_count", "rose_batch_sequences_count", "rose_sequences_total"):
        assert metric(server.url, name) >= 1
    for name in ("rose_queue_tokens", "rose_queue_inputs", "rose_tokens_per_second", "rose_graph_replays_total",
                 "rose_eager_runs_total", "rose_graph_capture_failures_total", "rose_inputs_cancelled_total",
                 "rose_batches_failed_total"):
        assert re.search(rf"^{name} \d", text, re.M), name
    assert metric(server.url, "rose_ready") == 1 and metric(server.url, "rose_engine_up") == 1
    # On CPU every batch, warm-up included, runs eagerly and none replays a graph.
    assert metric(server.url, "rose_eager_runs_total") >= metric(server.url, "rose_batch_sequences_count") + 2
    assert metric(server.url, "rose_graph_replays_total") == 0
    # On the CPU the engine runs in a process of its own (--engine-process auto): its resident set.
    assert metric(server.url, 'rose_device_memory_bytes{device="cpu",engine="0",kind="resident"}') > 10e6
    assert metric(server.url, "process_resident_memory_bytes") > 10e6


def test_log_line_per_request_without_input_text(server):
    secret = f"private-{uuid.uuid4().hex}"
    r = embed(server.url, {"input": [secret, "other"], "model": MODEL}, headers={"x-request-id": "log-check-1"})
    assert r.status_code == 200
    time.sleep(0.3)
    lines = [line for line in server.log_path.read_text().splitlines() if "log-check-1" in line]
    assert len(lines) == 1, lines
    assert "POST /v1/embeddings 200" in lines[0]
    for field in ("status=200", "inputs=2", "tokens=", "total_ms=", "inference_ms=", "bytes_in=", "bytes_out="):
        assert field in lines[0], field
    assert secret not in server.log_path.read_text()


def test_json_log_lines_and_log_inputs(configured):
    text = f"logged-{uuid.uuid4().hex}"
    r = embed(configured.url, {"input": [text], "model": MODEL}, headers={"x-request-id": "json-check-1"})
    assert r.status_code == 200
    time.sleep(0.3)
    entries = [json.loads(line) for line in configured.log_path.read_text().splitlines() if line.startswith("{")]
    mine = [e for e in entries if e.get("request_id") == "json-check-1"]
    assert len(mine) == 1
    entry = mine[0]
    assert entry["status"] == 200 and entry["inputs"] == 1 and entry["tokens"] > 2
    assert entry["total_ms"] >= entry["inference_ms"] > 0
    assert entry["inputs_text"] == [text]  # --log-inputs
    assert any(e["logger"].startswith("uvicorn") for e in entries)  # every line is JSON, uvicorn's too


def test_cors_is_off_unless_configured(server, configured):
    preflight = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}
    r = httpx.options(server.url + "/v1/embeddings", headers=preflight, timeout=10)
    assert "access-control-allow-origin" not in r.headers
    r = embed(server.url, {"input": "x", "model": MODEL}, headers={"Origin": ORIGIN})
    assert "access-control-allow-origin" not in r.headers
    r = httpx.options(configured.url + "/v1/embeddings", headers=preflight, timeout=10)
    assert r.headers.get("access-control-allow-origin") == ORIGIN
    r = httpx.options(configured.url + "/v1/embeddings",
                      headers={**preflight, "Origin": "https://evil.example"}, timeout=10)
    assert r.headers.get("access-control-allow-origin") != "https://evil.example"


def test_body_over_max_body_bytes_gets_413_before_it_is_read(configured):
    status, body = raw_post(configured.port, {"Content-Type": "application/json", "Content-Length": "130000000"},
                            b'{"input": "')
    assert status == 413
    error = json.loads(body)["error"]
    assert error["code"] == "request_too_large" and error["type"] == "invalid_request_error"


def test_a_100_mb_string_is_refused_before_tokenizing(configured):
    started = time.monotonic()
    r = embed(configured.url, {"input": "a" * 100_000_000, "model": MODEL}, timeout=120)
    error = assert_envelope(r, 400, "input_too_long")
    assert error["param"] == "input"
    assert time.monotonic() - started < 60
    assert embed(configured.url, {"input": "a" * 1000, "model": MODEL}).status_code == 200


def test_inputs_per_request_limit(configured):
    assert_envelope(embed(configured.url, {"input": ["x"] * 17, "model": MODEL}), 400)
    assert embed(configured.url, {"input": ["x"] * 16, "model": MODEL}).status_code == 200
