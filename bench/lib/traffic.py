"""Client side of the load generator: a seeded request plan, and worker processes that send it.

The plan is fixed before any timing: request i holds texts[lo_i:hi_i] (1 to 64 texts, sizes
drawn from a seeded RNG) and asks for `float` or `base64`. Worker processes (spawned, so
they carry no torch or CUDA state) each drive a share of the clients over keep-alive
connections of a minimal HTTP client (bench/lib/lean_http.py); one Python process cannot parse
responses as fast as a GPU server produces them, so the client side can be spread over
several, and each reports its CPU share of a core (one near 100 % measures itself, not the
server). Bodies are kept as bytes while timing and decoded afterwards, so the decoding cost
of the client never slows the server's clock. A request lost below HTTP (reset, broken
pipe, closed without a response) is a failed request like a non-200 status.

A `Route` says where the requests go and what else they ask: /v1/embeddings and a vector per text by
default; TEI's /embed_sparse, a ColBERT model's documents or BGE-M3's `outputs` for bench/heads.py's HTTP
arm, whose answers are kept per text as decoded (ANSWERS) instead of stacked into one array.
"""

from __future__ import annotations

import asyncio
import base64
import time
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from bench.lib.lean_http import AsyncConnection, BlockingConnection, TransportError


@dataclass(frozen=True)
class Route:
    """Where a plan's requests go, the field their texts go in, what else each body holds, and how an
    answer reads (ANSWERS)."""

    path: str = "/v1/embeddings"
    input_field: str = "input"
    fields: tuple[tuple[str, Any], ...] = ()  # sent in every body, as (name, value)
    answer: str = "vector"
    has_formats: bool = True  # the body names the request's encoding_format (TEI's /embed_sparse has none)


EMBEDDINGS = Route()


@dataclass(frozen=True)
class PlannedRequest:
    lo: int  # texts[lo:hi] of the workload
    hi: int
    encoding_format: str  # "float" | "base64"


def make_plan(num_texts: int, max_request_texts: int, seed: int, formats: tuple[str, ...]) -> list[PlannedRequest]:
    """Cover texts[0:num_texts] in order with requests of 1..max_request_texts texts."""
    rng = np.random.default_rng(seed)
    plan, lo = [], 0
    while lo < num_texts:
        hi = min(num_texts, lo + int(rng.integers(1, max_request_texts + 1)))
        plan.append(PlannedRequest(lo, hi, formats[int(rng.integers(len(formats)))]))
        lo = hi
    return plan


# A steady window lasts at least this many median request latencies (see steady_window).
STEADY_WINDOW_LATENCIES = 10


@dataclass
class WorkerResult:
    started: float  # time.monotonic() (one clock for all processes on Linux)
    finished: float
    latencies: list[float]  # seconds per request
    answered: list[tuple[int, int, float]]  # (lo, hi, time.monotonic() of the answer) per answered request
    ramped_up: float  # time.monotonic() when the last of this process's clients got its first answer
    last_taken: float  # time.monotonic() when this process's last planned request was sent (then its clients idle)
    indices: np.ndarray  # [n] int: which text each vector belongs to
    vectors: np.ndarray  # [n, dim] float32, as decoded from the responses (another Route's: [n] of its answers)
    errors: list[str]  # failed requests: non-200 statuses and transport errors, one line each
    cpu_seconds: float  # this client process's CPU time while sending (its cost on a shared machine)
    transport_errors: int = 0  # of the errors, the requests that got no complete HTTP response

    @property
    def cpu_share(self) -> float:
        """CPU seconds per wall second while sending: a share of one core."""
        return self.cpu_seconds / max(self.finished - self.started, 1e-9)


class _Item(msgspec.Struct):
    index: int
    embedding: list[float] | str


class _Body(msgspec.Struct):
    data: list[_Item]


def decode_body(body: bytes) -> list[tuple[int, np.ndarray]]:
    """(index, float32 vector) per item of an embeddings response, either format."""
    out = []
    for item in msgspec.json.decode(body, type=_Body).data:
        e = item.embedding
        vector = np.frombuffer(base64.b64decode(e), dtype="<f4") if isinstance(e, str) else np.asarray(e, np.float32)
        out.append((item.index, vector))
    return out


class _Pair(msgspec.Struct):
    index: int
    value: float


class _Sparse(msgspec.Struct):
    indices: list[int]
    values: list[float]


class _TokenItem(msgspec.Struct):
    index: int
    embedding: list[list[float]] | str


class _TokenBody(msgspec.Struct):
    data: list[_TokenItem]


class _OutputsItem(msgspec.Struct):
    index: int
    dense: list[float] | str
    sparse: _Sparse
    colbert: list[list[float]] | str


class _OutputsBody(msgspec.Struct):
    data: list[_OutputsItem]


def _vector(value: list[float] | str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(value), dtype="<f4") if isinstance(value, str) else np.asarray(value, np.float32)


def _token_vectors(value: list[list[float]] | str, dim: int) -> np.ndarray:
    """A text's token vectors [n, D]: an array per token, or one base64 string of them row after row."""
    if isinstance(value, str):
        return np.frombuffer(base64.b64decode(value), dtype="<f4").reshape(-1, dim)
    return np.asarray(value, np.float32) if value else np.zeros((0, dim), np.float32)


def _pairs(indices, values) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(indices, np.int64), np.asarray(values, np.float32)


def decode_tei_sparse(body: bytes, dim: int | None = None) -> list[tuple[int, tuple[np.ndarray, np.ndarray]]]:
    """(index, (token ids, weights)) per text of TEI's /embed_sparse answer (texts in order, no index field)."""
    texts = msgspec.json.decode(body, type=list[list[_Pair]])
    return [(i, _pairs([p.index for p in pairs], [p.value for p in pairs])) for i, pairs in enumerate(texts)]


def decode_multi_vector(body: bytes, dim: int | None = None) -> list[tuple[int, np.ndarray]]:
    """(index, token vectors [n, dim]) per item of a ColBERT model's /v1/embeddings answer, either format."""
    return [(item.index, _token_vectors(item.embedding, dim)) for item in msgspec.json.decode(body, type=_TokenBody).data]


def decode_multi_output(body: bytes, dim: int | None = None) -> list[tuple[int, tuple]]:
    """(index, (dense [H], (ids, weights), colbert [n, D])) per item of a BGE-M3 answer to all three `outputs`."""
    return [(item.index, (_vector(item.dense), _pairs(item.sparse.indices, item.sparse.values),
                          _token_vectors(item.colbert, dim)))
            for item in msgspec.json.decode(body, type=_OutputsBody).data]


def encode_plan(texts: list[str], plan: list[PlannedRequest], model: str | None,
                route: Route = EMBEDDINGS) -> list[tuple[PlannedRequest, bytes]]:
    """Each planned request's JSON body, encoded before the clock starts: the client's JSON work
    is not the server's time."""
    encoder = msgspec.json.Encoder()
    out = []
    for request in plan:
        payload = {route.input_field: texts[request.lo : request.hi], **dict(route.fields)}
        if route.has_formats:
            payload["encoding_format"] = request.encoding_format
        if model:
            payload["model"] = model
        out.append((request, encoder.encode(payload)))
    return out


async def _drive(url: str, encoded: list[tuple[PlannedRequest, bytes]], num_clients: int, path: str
                 ) -> tuple[float, float, float, float, list[float], list[tuple[PlannedRequest, bytes, float]],
                            list[str], int]:
    queue: asyncio.Queue[tuple[PlannedRequest, bytes]] = asyncio.Queue()
    for item in encoded:
        queue.put_nowait(item)
    latencies: list[float] = []
    bodies: list[tuple[PlannedRequest, bytes, float]] = []
    errors: list[str] = []
    last_taken = float("inf")
    first_answers: list[float] = []
    transport_errors = 0

    async def client_loop() -> None:
        nonlocal last_taken, transport_errors
        first = True
        connection = AsyncConnection(url)
        try:
            while not queue.empty():
                request, content = queue.get_nowait()
                if queue.empty():
                    last_taken = time.monotonic()
                t = time.perf_counter()
                try:
                    status, body = await connection.post(path, content)
                except TransportError as exc:
                    transport_errors += 1
                    errors.append(f"transport: {exc} (texts {request.lo}:{request.hi})")
                    continue
                latencies.append(time.perf_counter() - t)
                if status != 200:
                    errors.append(f"{status}: {body[:200].decode(errors='replace')}")
                else:
                    bodies.append((request, body, time.monotonic()))
                if first:
                    first_answers.append(time.monotonic())
                    first = False
        finally:
            await connection.close()

    started = time.monotonic()
    await asyncio.gather(*[client_loop() for _ in range(num_clients)])
    finished = time.monotonic()
    ramped_up = max(first_answers) if len(first_answers) == num_clients else finished
    return started, finished, ramped_up, min(last_taken, finished), latencies, bodies, errors, transport_errors


def run_worker(url: str, texts: list[str], plan: list[PlannedRequest], num_clients: int, model: str | None,
               start_at: float, route: Route = EMBEDDINGS, dim: int | None = None) -> WorkerResult:
    """One process's share: wait for the common start, send, then decode what came back. Other routes' answers
    (`dim`: the width of a token vector, for base64 ones) are kept per text, an object array of them."""
    import uvloop

    encoded = encode_plan(texts, plan, model, route)
    delay = start_at - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    cpu = time.process_time()
    drive = _drive(url, encoded, num_clients, route.path)
    started, finished, ramped_up, last_taken, latencies, bodies, errors, transport_errors = uvloop.run(drive)
    cpu = time.process_time() - cpu
    indices, vectors = [], []
    answered = [(request.lo, request.hi, at) for request, _, at in bodies]
    for request, body, _ in bodies:
        items = decode_body(body) if route.answer == "vector" else ANSWERS[route.answer](body, dim)
        if [i for i, _ in items] != list(range(request.hi - request.lo)):
            errors.append(f"request for texts {request.lo}:{request.hi}: indices out of order or missing")
            continue
        indices += range(request.lo, request.hi)
        vectors += [v for _, v in items]
    if route.answer != "vector":
        kept = np.empty(len(vectors), dtype=object)
        for i, answer in enumerate(vectors):
            kept[i] = answer
    else:
        kept = np.stack(vectors) if vectors else np.zeros((0, 0), np.float32)
    return WorkerResult(started, finished, latencies, answered, ramped_up, last_taken,
                        np.asarray(indices, dtype=np.int64), kept, errors, cpu, transport_errors)


# Route.answer -> how a response body reads, for the routes other than /v1/embeddings' vectors.
ANSWERS = {"tei_sparse": decode_tei_sparse, "multi_vector": decode_multi_vector, "multi_output": decode_multi_output}


def steady_bounds(results: list[WorkerResult]) -> tuple[float, float]:
    """(opens, closes), time.monotonic(), of steady_window's window, whether or not it is long enough to count."""
    return max(r.ramped_up for r in results), min(r.last_taken for r in results)


def steady_window(results: list[WorkerResult], token_prefix: np.ndarray,
                  min_latencies: float = STEADY_WINDOW_LATENCIES) -> tuple[float, int]:
    """(seconds, tokens) of the window in which every client was busy in its steady cycle, or
    (0.0, 0) if the round was too short to have one; token_prefix[i]: the tokens of texts[:i].

    It opens once every client has had its first answer (before that, the server is still
    filling up from idle) and closes as the first process sends its last planned request
    (after that, clients run out of requests one by one: a lighter load than asked for).
    Only requests answered inside it count: at a steady rate, those that straddle its start
    stand in for those that straddle its end, which holds only for a window many request
    latencies long, so a shorter one is none."""
    opened, closed = steady_bounds(results)
    latencies = [x for r in results for x in r.latencies]
    if not latencies or closed - opened < min_latencies * float(np.median(latencies)):
        return 0.0, 0
    tokens = sum(int(token_prefix[hi] - token_prefix[lo]) for r in results for lo, hi, at in r.answered
                 if opened < at <= closed)
    return closed - opened, tokens


def run_latency(url: str, queries: list[str], model: str | None, encoding_format: str = "float",
                num_warmup: int = 20) -> tuple[list[float], np.ndarray, np.ndarray, list[str]]:
    """Single short queries, one at a time on one keep-alive connection: the idle server's latency."""
    latencies, indices, vectors, errors = [], [], [], []
    encoder = msgspec.json.Encoder()
    connection = BlockingConnection(url)
    try:
        for i, text in enumerate([*queries[:num_warmup], *queries]):
            payload = {"input": text, "encoding_format": encoding_format}
            if model:
                payload["model"] = model
            content = encoder.encode(payload)
            t = time.perf_counter()
            try:
                status, body = connection.post("/v1/embeddings", content)
            except TransportError as exc:
                errors.append(f"transport: {exc} (query {i - num_warmup})")
                continue
            elapsed = time.perf_counter() - t
            if status != 200:
                errors.append(f"{status}: {body[:200].decode(errors='replace')}")
                continue
            if i >= num_warmup:
                latencies.append(elapsed)
                indices.append(i - num_warmup)
                vectors.append(decode_body(body)[0][1])
    finally:
        connection.close()
    stacked = np.stack(vectors) if vectors else np.zeros((0, 0), np.float32)
    return latencies, np.asarray(indices, dtype=np.int64), stacked, errors
