"""The mixed soak's run: concurrent clients send bench/lib/soak_mix.py's requests for a set time
while a thread samples every process's resident set (bench/lib/process_memory.py); then the
server idles a few seconds and is sampled again. bench/soak.py starts the server and writes the
report (bench/lib/soak_report.py).
"""

from __future__ import annotations

import asyncio
import collections
import random
import threading
import time
from dataclasses import dataclass, field

import httpx

from bench.lib.process_memory import MemoryWatch
from bench.lib.soak_mix import EMBEDDER, Request, Texts, pick, problem

MAX_RETRIES = 30  # a good request refused with 429 waits its Retry-After and tries again, this often


@dataclass
class KindTally:
    sent: int = 0
    passed: int = 0
    inputs: int = 0
    retried_429: int = 0
    transport_errors: int = 0
    statuses: collections.Counter = field(default_factory=collections.Counter)
    seconds: list[float] = field(default_factory=list)


@dataclass
class Tally:
    kinds: dict[str, KindTally] = field(default_factory=lambda: collections.defaultdict(KindTally))
    problems: list[str] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return sum(k.sent - k.passed for k in self.kinds.values())


def model_width(url: str) -> int:
    answer = httpx.post(url + "/v1/embeddings", json={"input": "width", "model": EMBEDDER}, timeout=60).json()
    return len(answer["data"][0]["embedding"])


async def _send(client: httpx.AsyncClient, url: str, request: Request, tally: KindTally) -> tuple[int, bytes]:
    """The final status and body: a good request refused with 429 waits as told and retries."""
    for _ in range(MAX_RETRIES):
        r = await client.post(url + request.path, content=request.body, headers={"content-type": "application/json"})
        if r.status_code != 429 or not request.is_good:
            return r.status_code, r.content
        tally.retried_429 += 1
        await asyncio.sleep(min(float(r.headers.get("retry-after", "1")), 10.0))
    return r.status_code, r.content


async def _client(client: httpx.AsyncClient, url: str, rng: random.Random, texts: Texts, width: int,
                  deadline: float, tally: Tally) -> None:
    while time.monotonic() < deadline:
        request = pick(rng, texts)
        kind = tally.kinds[request.kind]
        kind.sent += 1
        started = time.monotonic()
        try:
            status, content = await _send(client, url, request, kind)
        except httpx.TransportError as exc:
            kind.transport_errors += 1
            tally.problems.append(f"{request.kind}: {type(exc).__name__}: {exc}")
            continue
        kind.seconds.append(time.monotonic() - started)
        kind.statuses[status] += 1
        wrong = problem(request, status, content, width)
        if wrong is None:
            kind.passed += 1
            kind.inputs += request.num_inputs
        elif len(tally.problems) < 50:
            tally.problems.append(f"{request.kind}: {wrong}")


def _sample_until(watch: MemoryWatch, every: float, stop: threading.Event) -> None:
    while not stop.wait(every):
        watch.sample()


def run_mixed(url: str, watch: MemoryWatch, texts: Texts, *, seconds: float, clients: int, idle_seconds: float,
              sample_every: float, seed: int) -> tuple[Tally, float]:
    """Load for `seconds` from `clients` concurrent clients, then idle; returns the tally and the
    time (on the watch's clock) the load ended. Samples are taken throughout, on their own
    thread so that a busy client loop does not delay them."""
    width = model_width(url)
    tally = Tally()
    stop = threading.Event()
    sampler = threading.Thread(target=_sample_until, args=(watch, sample_every, stop), daemon=True)
    watch.sample()
    sampler.start()

    async def load() -> None:
        deadline = time.monotonic() + seconds
        limits = httpx.Limits(max_connections=clients)
        async with httpx.AsyncClient(timeout=300, limits=limits) as client:
            await asyncio.gather(*(_client(client, url, random.Random(seed * 1000 + i), texts, width, deadline, tally)
                                   for i in range(clients)))

    try:
        asyncio.run(load())
        load_end = time.monotonic() - watch.started
        time.sleep(idle_seconds)
    finally:
        stop.set()
        sampler.join()
    watch.sample()
    return tally, load_end
