"""A request that the server's stop cuts off (its task cancelled: a second Ctrl-C, or
--shutdown-timeout passed) is answered 503 in OpenAI's envelope and counted as such, not left
to uvicorn, which logs a traceback and answers a plain-text 500 (fake engine, in process; the
real server's signals: tests/server/test_lifecycle.py)."""

from __future__ import annotations

import asyncio
import json

from tests.support.fake_engine import FAKE_MODEL, FakeEngine, observed_app
from tests.support.helpers import sample


def test_a_cancelled_request_is_answered_503_in_the_envelope():
    app = observed_app(FakeEngine(delay=0.3))  # the request is still computing when it is cancelled
    body = json.dumps({"input": ["cut off"], "model": FAKE_MODEL}).encode()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/v1/embeddings", "raw_path": b"/v1/embeddings", "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    sent: list[dict] = []
    received = []

    async def receive():
        if not received:
            received.append(True)
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client stays

    async def send(message):
        sent.append(message)

    async def cut_off():
        async with app.app.lifespan():
            while not app.app.state.runtime.is_ready:
                await asyncio.sleep(0.005)
            request = asyncio.ensure_future(app(scope, receive, send))
            await asyncio.sleep(0.1)
            request.cancel()
            await request  # ends, rather than raising the cancellation on to uvicorn
            return request

    request = asyncio.run(cut_off())
    assert not request.cancelled()
    start, body_message = sent
    assert start["status"] == 503
    headers = dict(start["headers"])
    assert headers[b"content-type"] == b"application/json" and headers[b"connection"] == b"close"
    error = json.loads(body_message["body"])["error"]
    assert error == {"message": "The server is shutting down; retry the request.", "type": "server_error",
                     "param": None, "code": "server_shutting_down"}
    assert int(headers[b"content-length"]) == len(body_message["body"])
    assert b"x-request-id" in headers  # observed as any other answer
    exposition = app.metrics.render().decode()
    assert sample(exposition, f'rose_requests_total{{model="{FAKE_MODEL}",route="/v1/embeddings",status="503"}}') == 1
