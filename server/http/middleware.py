"""ASGI wrapper around the whole app: request id, timing headers, metrics and one log line,
and a 503 in OpenAI's envelope for a request that the server's stop cuts off.

It wraps the Litestar app from outside (not as Litestar middleware), so that it also sees
the requests Litestar answers before any route runs: 404, 405, 413.
"""

from __future__ import annotations

import asyncio
import logging
import time

from litestar import Litestar

from rose_embed.server.http.errors import envelope, shutting_down
from rose_embed.server.http.guarded_http import DRAINING_KEY
from rose_embed.server.pipeline.guards import body_too_slow, client_closed, upload_cut_off_by_drain
from rose_embed.server.http.logs import ACCESS_LOGGER
from rose_embed.server.http.trace import SCOPE_KEY, RequestTrace, request_id_from

access_log = logging.getLogger(ACCESS_LOGGER)

def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


class ObservedApp:
    """Wraps an ASGI app; `app.state.metrics` receives the counts."""

    def __init__(self, app: Litestar, log_inputs: bool = False, worker_pid: int | None = None,
                 request_timeout: float | None = None):
        self.app, self.metrics, self.log_inputs = app, app.state.metrics, log_inputs
        self.routes = app.state.routes  # what the declared routes say of a path (server/http/route_index.py)
        # uvicorn bounds no body's arrival: without this a client that stops sending its body
        # would hold its connection and its request forever, --request-timeout notwithstanding.
        self.request_timeout = request_timeout
        # --frontend-workers: every response names the front-end process that answered it.
        self._worker_header = [(b"x-rose-worker", str(worker_pid).encode())] if worker_pid is not None else []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        trace = RequestTrace(request_id_from(scope.get("headers", [])))
        scope[SCOPE_KEY] = trace
        sizes = {"bytes_in": 0, "bytes_out": 0}
        status = 500  # what the client sees if the app raises without answering

        is_body_pending = True

        async def counted_receive():
            nonlocal is_body_pending
            if not is_body_pending:
                return await receive()  # after the body: waits for the client to leave, unbounded
            if self.request_timeout is not None:
                time_left = self.request_timeout - (time.perf_counter() - trace.started)
                try:
                    async with asyncio.timeout(max(0.0, time_left)):
                        message = await receive()
                except TimeoutError:
                    raise body_too_slow() from None
            else:
                message = await receive()
            if message["type"] == "http.disconnect":
                raise client_closed()  # mid-body: the client's doing, not a failure of the server's
            is_body_pending = message.get("more_body", False)
            if is_body_pending and DRAINING_KEY in scope:
                raise upload_cut_off_by_drain()  # the drain does not wait for the rest of a slow upload
            sizes["bytes_in"] += len(message.get("body", b""))
            return message

        async def observed_send(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                trace.responded = time.monotonic()
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", trace.request_id.encode()))
                headers += self._worker_header
                for phase, seconds in trace.phases().items():
                    headers.append((f"x-{phase}-time-ms".encode(), _ms(seconds).encode()))
                headers.append((b"x-total-time-ms", _ms(time.perf_counter() - trace.started).encode()))
                message = {**message, "headers": headers}
            elif message["type"] == "http.response.body":
                sizes["bytes_out"] += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, counted_receive, observed_send)
        except asyncio.CancelledError:
            # Only the server's stop cancels a request: a second Ctrl-C, or --shutdown-timeout
            # passed. Let through, uvicorn would log the cancellation as a traceback and answer
            # a plain-text 500; the request ends here instead, answered as any other error.
            if trace.responded is None:
                await _send_shutting_down(observed_send)
        finally:
            total = time.perf_counter() - trace.started
            phases = {**trace.phases(), "total": total}
            self.metrics.observe_request(self.routes.label(scope["path"]), status, phases, trace.model,
                                         trace.num_inputs, trace.num_tokens)
            fields = {"request_id": trace.request_id, "method": scope["method"], "path": scope["path"],
                      "status": status, **sizes, "inputs": trace.num_inputs, "tokens": trace.num_tokens,
                      **{f"{k}_ms": round(v * 1000, 2) for k, v in phases.items()}}
            fields = {k: v for k, v in fields.items() if v is not None}
            if self.log_inputs and trace.texts is not None:
                fields["inputs_text"] = trace.texts
            # Probes and scrapes come every few seconds and would drown the log. /health's 503 is
            # an answer too (still loading, or the engine is gone, which is logged where it happens).
            path = scope["path"]
            quiet = self.routes.is_polled(path) and (status < 400 or (status == 503 and path == "/health"))
            access_log.log(logging.DEBUG if quiet else logging.INFO, "%s %s %d", scope["method"], scope["path"], status,
                           extra={"fields": fields})


async def _send_shutting_down(send) -> None:
    err = shutting_down()
    body = envelope(err)
    await send({"type": "http.response.start", "status": err.status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
