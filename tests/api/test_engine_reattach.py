"""A front end takes up a restarted engine (server/links/reattach.py), in process and fast: the
engines are threads of this process (tests/api/test_engine_queue.py's fakes), the supervisor's
restart messages come down a real pipe."""

from __future__ import annotations

import asyncio
import multiprocessing

import pytest

from rose_embed.engine.contract.interface import EngineUnavailableError
from rose_embed.engine.contract.batch import pack
from rose_embed.server.links.engine_links import EngineLinks
from rose_embed.server.links.reattach import EngineDown, EngineUp
from rose_embed.server.processes.in_process_engine import InProcessEngine
from tests.api.test_engine_queue import DIE, FakeEngine, request, run, seq


def test_a_dead_engine_fails_with_retry_after_until_its_restart_is_taken_up():
    first, second = FakeEngine(0), FakeEngine(1)  # the engine before and after its restart
    before, after = InProcessEngine(first, (8, 4), index=0), InProcessEngine(second, (8, 4), index=0)
    reader, writer = multiprocessing.get_context("spawn").Pipe(duplex=False)

    async def main():
        before.start()
        links = EngineLinks([before.ends], in_process=True, restarts=reader)
        await asyncio.to_thread(links.start, 10.0)
        links.attach(asyncio.get_running_loop())
        try:
            (dead,) = await request(links, [seq(DIE)])
            with pytest.raises(EngineUnavailableError) as refused:
                await links.open_request().compute(pack([seq(4)]))
            writer.send(EngineDown(0, "its process was killed by SIGKILL; restarting it", 7))
            while links.describe()[0]["state"] != "restarting":
                await asyncio.sleep(0.01)
            told = links.problem(), links.retry_after(), links.describe()[0]
            after.start()
            writer.send(EngineUp(after.ends))
            while links.problem() is not None:
                await asyncio.sleep(0.01)
            (vectors,) = await request(links, [seq(5)])
            return dead, refused.value, told, vectors, links.describe()[0]
        finally:
            links.stop_serving()
            links.shutdown()

    try:
        dead, refused, (problem, retry_after, state), vectors, serving = run(main())
    finally:
        for served in (before, after):
            served.close(5.0)
    # Lost with it, and refused while it is down: 503 with when to come back, not a bare 500.
    assert isinstance(dead, EngineUnavailableError) and 1 <= dead.retry_after <= 60
    assert isinstance(refused, EngineUnavailableError) and refused.retry_after is not None
    assert "SIGKILL" in problem and "restarting" in problem and state["state"] == "restarting"
    assert 5 <= retry_after <= 7  # as the supervisor estimated, counted down
    assert vectors[0, 0] == 5 and vectors[0, 2] == 1  # computed by the new engine
    assert serving["state"] == "serving"
