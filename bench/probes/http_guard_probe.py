"""What the front end's guard around uvicorn's httptools protocol (server/http/guarded_http.py) costs a
request: the same requests through uvicorn's HttpToolsProtocol and through the guarded one, on
one event loop with no socket, first to an app that answers at once (the protocol's own work is
all that is timed), then to the server's own app on the default model, in this process on the
CPU (the guard's share of a whole request).

    python bench/probes/http_guard_probe.py --out bench/results/http/http-guard-probe.md

Each round sends keep-alive requests on one connection, each in one read (as a client's request
arrives), through each protocol in turn; the report gives each protocol's fastest and median
round, in the event loop thread's CPU time per request, and the differences (on a shared machine
the fastest round is the one least disturbed by other work).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.lib.common import machine_description, publish  # noqa: E402
from rose_embed.server.http.guarded_http import HttpLimits, guarded_protocol  # noqa: E402

BODY = b'{"input": ["a short query of a few words"]}'
# The head the OpenAI SDK sends for an embeddings request (its own headers, a key, a JSON body).
REQUEST = (b"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nAccept-Encoding: gzip, deflate\r\n"
           b"Connection: keep-alive\r\nAccept: application/json\r\nContent-Type: application/json\r\n"
           b"User-Agent: OpenAI/Python 1.99.0\r\nX-Stainless-Lang: python\r\nX-Stainless-Package-Version: 1.99.0\r\n"
           b"X-Stainless-OS: Linux\r\nX-Stainless-Arch: x64\r\nX-Stainless-Runtime: CPython\r\n"
           b"X-Stainless-Runtime-Version: 3.11.9\r\nAuthorization: Bearer sk-0123456789abcdef0123456789abcdef\r\n"
           b"X-Stainless-Async: false\r\nX-Stainless-Retry-Count: 0\r\nX-Stainless-Read-Timeout: 600\r\n"
           b"Content-Length: %d\r\n\r\n" % len(BODY)) + BODY
ANSWER = b'{"object": "list"}'


async def answer_at_once(scope, receive, send) -> None:
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(ANSWER))]})
    await send({"type": "http.response.body", "body": ANSWER})


class NullTransport(asyncio.Transport):
    """A connection that drops what the server writes."""

    def __init__(self):
        super().__init__()
        self.statuses: list[int] = []

    def write(self, data) -> None:
        if data.startswith(b"HTTP/1.1 "):
            self.statuses.append(int(data[9:12]))

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name, default=None):
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass


async def seconds_per_request(protocol_class, app, request: bytes, num_requests: int) -> float:
    """The event loop's CPU time per request (this thread's: the engine and the tokenizer threads
    of the server's app are not counted, the loop is what a front end runs out of first)."""
    config = uvicorn.Config(app, http=protocol_class, log_config=None, access_log=False)
    config.load()
    state = ServerState()
    protocol = config.http_protocol_class(config=config, server_state=state, app_state={})
    transport = NullTransport()
    protocol.connection_made(transport)
    started = time.thread_time()
    for _ in range(num_requests):
        protocol.data_received(request)
        await next(iter(state.tasks))  # the request's task has answered
    elapsed = time.thread_time() - started
    assert transport.statuses == [200] * num_requests, transport.statuses[:3]
    protocol.connection_lost(None)
    return elapsed / num_requests


async def measure(app, request: bytes, num_requests: int, num_rounds: int) -> dict[str, list[float]]:
    protocols = {"uvicorn's HttpToolsProtocol": HttpToolsProtocol,
                 "guarded (server/http/guarded_http.py)": guarded_protocol(HttpLimits(32 * 1024, 10.0, 1024),
                                                                    on_refused=print)}
    times: dict[str, list[float]] = {name: [] for name in protocols}
    for protocol_class in protocols.values():  # warm both up
        await seconds_per_request(protocol_class, app, request, max(1, num_requests // 10))
    for _ in range(num_rounds):
        for name, protocol_class in protocols.items():
            times[name].append(await seconds_per_request(protocol_class, app, request, num_requests))
    return times


async def server_app():
    """The server's own app (server/app.py in server/http/middleware.py's wrapper) on the default model,
    in this process on the CPU, once ready; to be closed with `aclose()`."""
    from contextlib import AsyncExitStack

    from rose_embed.server.app import create_app
    from rose_embed.server.config import ServerConfig
    from rose_embed.server.http.middleware import ObservedApp

    app = ObservedApp(create_app(ServerConfig()))
    stack = AsyncExitStack()
    await stack.enter_async_context(app.app.lifespan())
    while not app.app.state.runtime.is_ready:
        await asyncio.sleep(0.05)
    return app, stack


async def measure_both(args: argparse.Namespace) -> list[tuple[str, int, dict[str, list[float]]]]:
    tables = [("an app that answers at once", args.requests,
               await measure(answer_at_once, REQUEST, args.requests, args.rounds))]
    app, stack = await server_app()
    try:
        num_requests = max(1, args.requests // 20)
        tables.append(("the server's app (one text, default model, engine in a thread)", num_requests,
                       await measure(app, REQUEST, num_requests, args.rounds)))
    finally:
        await stack.aclose()
    return tables


def report(tables, args: argparse.Namespace) -> str:
    lines = ["# What the HTTP guard costs a request", "",
             f"- command: `python {' '.join(sys.argv)}`",
             f"- machine: {machine_description()}; uvicorn {uvicorn.__version__}; "
             f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             f"- keep-alive requests of {len(REQUEST)} bytes (the OpenAI SDK's head, one text; head and body in one "
             f"read) on one connection, {args.rounds} rounds, the protocols alternating; uvloop, no socket; the "
             "event loop thread's CPU time per request", "",
             "| app | requests per round | protocol | fastest round, us per request | median round, us per request |",
             "|---|---:|---|---:|---:|"]
    summary = []
    for app, num_requests, times in tables:
        fastest = {name: min(values) for name, values in times.items()}
        medians = {name: statistics.median(values) for name, values in times.items()}
        for name in times:
            lines.append(f"| {app} | {num_requests} | {name} | {fastest[name] * 1e6:.1f} | {medians[name] * 1e6:.1f} |")
        (plain_fastest, guarded_fastest), (plain_median, guarded_median) = fastest.values(), medians.values()
        summary.append(f"- {app}: the guard adds {(guarded_fastest - plain_fastest) * 1e6:+.1f} us per request in the "
                       f"fastest rounds ({(guarded_fastest / plain_fastest - 1) * 100:+.1f} %), "
                       f"{(guarded_median - plain_median) * 1e6:+.1f} us in the median ones "
                       f"({(guarded_median / plain_median - 1) * 100:+.1f} %)")
    return "\n".join([*lines, "", *summary]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000,
                        help="requests per round to the app that answers at once (a twentieth to the server's app)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    import uvloop

    publish(report(uvloop.run(measure_both(args)), args), args.out)


if __name__ == "__main__":
    main()
