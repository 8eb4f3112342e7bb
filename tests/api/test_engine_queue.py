"""The front end's engines (server/links/engine_links.py) over the engine's loop (engine/queue/engine_loop.py),
in process and fast: engines in threads of this process, fed over the real arena, board and
messages, with fake models whose vectors say what they computed."""

from __future__ import annotations

import asyncio
import threading
import time
from contextlib import asynccontextmanager
from types import SimpleNamespace

import numpy as np
import pytest

from rose_embed.engine.contract.interface import BatchFailedError, EngineUnavailableError, QueueFullError
from rose_embed.engine.contract.batch import pack
from rose_embed.server.links.engine_links import EngineLinks
from rose_embed.server.processes.in_process_engine import InProcessEngine

DIM = 4
DIE, RAISE, STUCK = 666, 555, 777  # first token ids that make a fake engine die, raise or hang


class _Ready:
    def __init__(self, vectors):
        self.vectors = vectors

    def wait(self):
        return self.vectors


class FakeEngine:
    """Each sequence's vector is [first id, length, engine index, 0]; records what it ran."""

    spec = SimpleNamespace(embedding_dim=DIM)
    device = SimpleNamespace(type="cpu")
    dtype = "float32"

    def __init__(self, index: int = 0, delay: float = 0.0):
        self.index, self.delay = index, delay
        self.computed: list[int] = []  # first ids, in the order computed
        self.batches: list[list[int]] = []
        self.finished: list[float] = []  # when each batch's compute ended
        self.release = threading.Event()

    def __str__(self) -> str:
        return "cpu"

    def execute_packed(self, batch):
        time.sleep(self.delay)
        cu = batch.cu_seqlens
        firsts = [int(batch.input_ids[cu[i]]) for i in range(batch.num_seqs)]
        if DIE in firsts:
            raise SystemExit("the engine thread dies")
        if RAISE in firsts:
            raise RuntimeError("boom")
        if STUCK in firsts:
            self.release.wait(30)  # a stuck kernel, until the test lets it go
        self.computed.extend(firsts)
        self.batches.append(firsts)
        self.finished.append(time.monotonic())
        out = np.zeros((batch.num_seqs, DIM), np.float32)
        out[:, 0], out[:, 1], out[:, 2] = firsts, np.diff(cu), self.index
        return _Ready(out)


def seq(first: int, n: int = 3) -> np.ndarray:
    return np.array([first] + [1] * (n - 1), dtype=np.int32)


@asynccontextmanager
async def engines(*fakes: FakeEngine, budget=(8, 4), max_queued_tokens=None, stall_timeout=120.0):
    served = [InProcessEngine(fake, budget, index=i) for i, fake in enumerate(fakes)]
    for one in served:
        one.start()
    links = EngineLinks([one.ends for one in served], stall_timeout=stall_timeout, in_process=True,
                        max_queued_tokens=max_queued_tokens)
    await asyncio.to_thread(links.start, 10.0)
    links.attach(asyncio.get_running_loop())
    try:
        yield links
    finally:
        links.stop_serving()
        links.shutdown()
        for fake in fakes:
            fake.release.set()
        for one in served:
            await asyncio.to_thread(one.close, 5.0)


async def request(links: EngineLinks, *pieces: list[np.ndarray], close: bool = True, cost: float = 0.0):
    """One request of these pieces (each a list of sequences); each piece's vectors, or its error."""
    ticket = links.open_request(cost=cost)
    try:
        results = await asyncio.gather(*(ticket.compute(pack(p)) for p in pieces), return_exceptions=True)
        return [r if isinstance(r, BaseException) else r.vectors for r in results]
    finally:
        if close:
            ticket.close()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_pieces_of_many_requests_come_back_whole_and_in_order_and_batches_form_across_them():
    fake = FakeEngine(delay=0.02)

    async def main():
        async with engines(fake, budget=(64, 16)) as links:
            return await asyncio.gather(*(request(links, [seq(10 * r + 1), seq(10 * r + 2, 5)], [seq(10 * r + 3)])
                                          for r in range(10)))

    answers = run(main())
    for r, (first, second) in enumerate(answers):
        np.testing.assert_array_equal(first[:, :2], [[10 * r + 1, 3], [10 * r + 2, 5]])
        np.testing.assert_array_equal(second[:, :2], [[10 * r + 3, 3]])
    assert sorted(fake.computed) == sorted(10 * r + i for r in range(10) for i in (1, 2, 3))
    assert len(fake.batches) < 20  # pieces that waited together ran together


def test_on_the_cpu_a_batch_is_answered_before_the_next_one_computes():
    """A CPU computes a batch as it is launched: were a second one launched before the first is
    answered, the first request would wait for both."""
    fake = FakeEngine(delay=0.4)

    async def main():
        async with engines(fake, budget=(8, 1)) as links:
            async def timed(first):
                await request(links, [seq(first)])
                return time.monotonic()

            return await asyncio.gather(timed(1), timed(2))

    first_answered, _ = run(main())
    assert len(fake.batches) == 2
    assert first_answered < fake.finished[1], "the first request waited for the second batch's compute"


def test_a_piece_past_the_budget_is_cut_across_batches_and_its_rows_come_back_in_order():
    fake = FakeEngine()

    async def main():
        async with engines(fake, budget=(8, 4)) as links:
            return await request(links, [seq(i, 3) for i in range(1, 8)])

    (vectors,) = run(main())
    np.testing.assert_array_equal(vectors[:, 0], list(range(1, 8)))
    assert [len(b) for b in fake.batches] == [2, 2, 2, 1]


def test_a_raising_batch_fails_only_the_piece_that_holds_the_fault():
    fake = FakeEngine(delay=0.05)

    async def main():
        async with engines(fake, budget=(64, 16)) as links:
            busy = asyncio.ensure_future(request(links, [seq(9)]))
            await asyncio.sleep(0.02)  # the next three wait together and join one batch
            answers = await asyncio.gather(request(links, [seq(1)]), request(links, [seq(RAISE)]),
                                           request(links, [seq(2)]))
            await busy
            return answers, links.problem(), links.links[0].board_snapshot()

    ((good,), (bad,), (after,)), problem, board = run(main())
    assert good[0, 0] == 1 and after[0, 0] == 2
    assert isinstance(bad, BatchFailedError) and "boom" in str(bad)
    assert problem is None and board["batches_failed"] >= 1


def test_a_dying_engine_fails_everything_at_once_and_for_good():
    async def main():
        async with engines(FakeEngine(), budget=(8, 1)) as links:
            answers = await asyncio.gather(request(links, [seq(DIE)]), request(links, [seq(3)]))
            with pytest.raises(EngineUnavailableError):
                await links.open_request().compute(pack([seq(4)]))
            return answers, links.problem(), links.describe()

    ((dead,), (behind,)), problem, (state,) = run(main())
    assert isinstance(dead, EngineUnavailableError) and isinstance(behind, EngineUnavailableError)
    assert "its thread ended" in problem and state["state"] == "out"


def test_a_stuck_engine_in_process_fails_what_waits_on_it_and_recovers():
    fake = FakeEngine()

    async def main():
        async with engines(fake, budget=(8, 1), stall_timeout=0.3) as links:
            started = time.monotonic()
            stuck_task = asyncio.ensure_future(request(links, [seq(STUCK)]))
            await asyncio.sleep(0.1)  # on the device: the next piece waits behind it
            (behind,), (stuck,) = await request(links, [seq(5)]), await stuck_task
            waited, problem = time.monotonic() - started, links.problem()
            fake.release.set()  # the kernel comes back: the engine serves again
            while links.problem() is not None:
                await asyncio.sleep(0.05)
            (again,) = await request(links, [seq(6)])
            return stuck, behind, waited, problem, again

    stuck, behind, waited, problem, again = run(main())
    assert isinstance(stuck, EngineUnavailableError) and isinstance(behind, EngineUnavailableError)
    assert waited < 3.0 and "stuck" in problem
    assert again[0, 0] == 6
    assert 5 not in fake.computed  # the request behind the stuck batch was cancelled, not computed


def test_a_cancelled_request_is_never_computed_and_gives_its_arena_space_back():
    fake = FakeEngine(delay=0.2)

    async def main():
        async with engines(fake, budget=(8, 4)) as links:
            first = asyncio.ensure_future(request(links, [seq(1)]))
            await asyncio.sleep(0.05)  # the first piece computes; the next request's wait in the queue
            gone = links.open_request()
            waiting = [asyncio.ensure_future(gone.compute(pack([seq(50 + i)]))) for i in range(3)]
            await asyncio.sleep(0.05)
            gone.close()
            for task in waiting:
                task.cancel()
            await asyncio.gather(*waiting, return_exceptions=True)
            (last,) = await request(links, [seq(2)])
            await first
            link = links.links[0]
            while link.tokens_outstanding:
                await asyncio.sleep(0.01)
            return last, link.board_snapshot(), link._ints.num_free == link._ints.size

    last, board, all_free = run(main())
    assert fake.computed == [1, 2] and last[0, 0] == 2
    assert board["pieces_cancelled"] == 3 and all_free


def test_a_full_queue_refuses_a_new_bulk_request_at_once_but_finishes_admitted_ones_and_admits_a_query():
    fake = FakeEngine(delay=0.3)

    async def main():
        async with engines(fake, budget=(8, 4), max_queued_tokens=1000) as links:
            admitted = links.open_request(cost=900)
            first = asyncio.ensure_future(admitted.compute(pack([seq(2, 8)])))
            await asyncio.sleep(0.05)
            started = time.monotonic()
            with pytest.raises(QueueFullError) as refused:
                links.open_request(cost=600)  # 900 + 600 past 1000, and no small request
            refused_in = time.monotonic() - started
            query = await request(links, [seq(3, 4)], cost=6)  # small: admitted past the bound
            second = await admitted.compute(pack([seq(5, 8)]))  # its request was admitted: never refused
            admitted.close()
            return refused.value, refused_in, query, (await first).vectors, second.vectors, links.admission.queued_tokens

    refused, refused_in, query, first, second, left = run(main())
    assert isinstance(refused.retry_after, int) and 1 <= refused.retry_after <= 60 and refused_in < 0.01
    assert first[0, 0] == 2 and second[0, 0] == 5 and query[0][0, 0] == 3
    assert left == 0  # every admitted request's tokens left the count as it ended


def test_pieces_spread_over_engines_and_the_others_serve_on_when_one_dies():
    fakes = FakeEngine(0, delay=0.05), FakeEngine(1, delay=0.05)

    async def main():
        async with engines(*fakes, budget=(8, 2)) as links:
            spread = await request(links, *[[seq(10 + i)] for i in range(6)])
            lost = await request(links, *[[seq(DIE)] if i == 1 else [seq(20 + i)] for i in range(4)])
            after = await request(links, [seq(30)], [seq(31)])
            return spread, lost, after, links.describe(), links.problem()

    spread, lost, after, states, problem = run(main())
    assert {int(v[0, 2]) for v in spread} == {0, 1}  # both engines computed some of one request
    assert any(isinstance(r, BatchFailedError) for r in lost)  # a retry would land on the other engine
    assert all(v[0, 2] == 0 for v in after) and problem is None
    assert [s["state"] for s in states] == ["serving", "out"]
