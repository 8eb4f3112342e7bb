"""Data parallel, in process and fast: the batcher's dispatch over several replicas (fakes),
fault isolation between them, the shared-memory slots and the device flags."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import numpy as np
import pytest

from engine.rose.batch import pack
from server.batcher import Batcher, BatchFailedError, EngineUnavailableError
from server.replica import Replica, ReplicaLostError
from engine.shm_slots import SharedSlots, SlotLayout
from server.watchdog import Watchdog

DIE, STUCK = 666, 777  # first token ids that make a fake replica die or hang


class FakeReplica(Replica):
    """Vectors are [first id, replica index]; records what it ran and how many batches it held at once."""

    can_retire = True

    def __init__(self, index: int, delay: float = 0.05):
        super().__init__(index, "cpu")
        self.delay = delay
        self.firsts: list[int] = []
        self.active = self.max_active = 0
        self._stuck: asyncio.Future | None = None

    async def compute(self, batch, running):
        running.started = time.perf_counter()
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            cu = batch.cu_seqlens
            firsts = [int(batch.input_ids[cu[i]]) for i in range(batch.num_seqs)]
            if DIE in firsts:
                self._go_out("its process was killed by SIGKILL")
                raise ReplicaLostError(self.out_reason)
            if STUCK in firsts:
                self._stuck = asyncio.get_running_loop().create_future()
                await self._stuck
            await asyncio.sleep(self.delay)
            self.firsts.extend(firsts)
            return np.array([[f, self.index] for f in firsts], np.float32)
        finally:
            self.active -= 1

    def retire(self, reason: str) -> None:
        self._go_out(reason)
        if self._stuck is not None and not self._stuck.done():
            self._stuck.set_exception(ReplicaLostError(reason))


def group(*replicas: Replica) -> SimpleNamespace:
    """What the batcher reads of EngineLinks."""
    return SimpleNamespace(spec=SimpleNamespace(max_seq_len=8), replicas=list(replicas))


def seq(first: int, n: int = 3) -> np.ndarray:
    return np.array([first] + [1] * (n - 1), dtype=np.int32)


def test_each_batch_goes_to_the_least_loaded_replica_and_at_most_two_per_replica():
    replicas = [FakeReplica(i) for i in range(3)]

    async def main():
        batcher = Batcher(group(*replicas), max_batch_tokens=8, max_batch_seqs=1)
        batcher.start()
        futures = [f for i in range(30) for f in batcher.submit([seq(100 + i)])]
        results = await asyncio.wait_for(asyncio.gather(*futures), 10)
        await batcher.stop()
        return results, batcher

    results, batcher = asyncio.run(main())
    assert [int(r[0]) for r in results] == list(range(100, 130))  # every input got its own vector
    # 30 equal batches over 3 replicas: each took its share, never more than 2 at once.
    assert [len(r.firsts) for r in replicas] == [10, 10, 10]
    assert all(r.max_active == 2 for r in replicas)
    # The first three went one to each (all idle: nobody got a second batch before every one had a first).
    assert [int(r[1]) for r in results[:3]] == [0, 1, 2]
    assert {record.engine for record in batcher.batch_log} == {0, 1, 2}


def test_the_replica_with_fewer_tokens_in_flight_is_chosen():
    busy, idle = FakeReplica(0, delay=0.5), FakeReplica(1, delay=0.5)

    async def main():
        batcher = Batcher(group(busy, idle), max_batch_tokens=8, max_batch_seqs=1)
        batcher.start()
        big = batcher.submit([seq(1, 8)])  # 8 tokens -> replica 0
        small = batcher.submit([seq(2, 2)])  # 2 tokens -> replica 1
        third = batcher.submit([seq(3, 2)])  # replica 1 holds 2 tokens, replica 0 holds 8
        results = await asyncio.wait_for(asyncio.gather(*big, *small, *third), 10)
        await batcher.stop()
        return results

    results = asyncio.run(main())
    assert [int(r[1]) for r in results] == [0, 1, 1]
    assert busy.max_active == 1 and idle.max_active == 2


def test_a_lost_replica_fails_only_its_own_batch_and_the_other_serves_on():
    dying, healthy = FakeReplica(0), FakeReplica(1)

    async def main():
        batcher = Batcher(group(dying, healthy), max_batch_tokens=8, max_batch_seqs=1)
        batcher.start()
        lost = batcher.submit([seq(DIE)])  # -> replica 0, which dies with it
        alongside = batcher.submit([seq(5)])  # -> replica 1
        first = await asyncio.wait_for(asyncio.gather(*lost, *alongside, return_exceptions=True), 10)
        after = await asyncio.wait_for(asyncio.gather(*[f for i in range(6) for f in batcher.submit([seq(10 + i)])]),
                                       10)
        await batcher.stop()
        return first, after, batcher

    (lost, alongside), after, batcher = asyncio.run(main())
    assert isinstance(lost, BatchFailedError) and "SIGKILL" in str(lost)
    assert alongside[0] == 5
    assert all(int(r[1]) == 1 for r in after)  # nothing more went to the dead replica
    assert batcher.fatal_error is None
    assert not dying.is_serving and healthy.is_serving


def test_when_every_replica_is_out_requests_fail_fast_as_unavailable():
    a, b = FakeReplica(0), FakeReplica(1)

    async def main():
        batcher = Batcher(group(a, b), max_batch_tokens=8, max_batch_seqs=1)
        batcher.start()
        first = batcher.submit([seq(DIE)])
        await asyncio.gather(*first, return_exceptions=True)
        second = batcher.submit([seq(DIE)])  # the last one serving
        results = await asyncio.wait_for(asyncio.gather(*second, return_exceptions=True), 10)
        with pytest.raises(EngineUnavailableError) as info:
            batcher.submit([seq(1)])
        await batcher.stop()
        return results, str(info.value)

    (result,), message = asyncio.run(main())
    assert isinstance(result, EngineUnavailableError)
    assert "every engine is out" in message and "engine 0" in message and "engine 1" in message


def test_the_watchdog_retires_a_stuck_replica_and_the_server_stays_up():
    stuck, healthy = FakeReplica(0), FakeReplica(1)

    async def main():
        batcher = Batcher(group(stuck, healthy), max_batch_tokens=8, max_batch_seqs=1)
        batcher.start()
        watchdog = Watchdog(batcher, stall_timeout=0.3)
        watchdog.start()
        hung = batcher.submit([seq(STUCK)])
        result = await asyncio.wait_for(asyncio.gather(*hung, return_exceptions=True), 5)
        later = await asyncio.wait_for(asyncio.gather(*batcher.submit([seq(9)])), 5)
        problem = watchdog.problem()
        watchdog.stop()
        await batcher.stop()
        return result, later, problem

    (result,), (later,), problem = asyncio.run(main())
    assert isinstance(result, BatchFailedError) and "stuck" in str(result)
    assert stuck.out_reason.startswith("stuck") and healthy.is_serving
    assert int(later[1]) == 1 and problem is None


def test_shared_slots_carry_a_batch_and_its_vectors_between_two_mappings():
    layout = SlotLayout(num_slots=2, max_tokens=16, max_seqs=4, dim=3)
    owner = SharedSlots.create(layout)
    other = SharedSlots.attach(owner.name, layout)  # what the engine process maps
    try:
        batch = pack([np.array([5, 6, 7], np.int32), np.array([8, 9], np.int32)])
        owner.write_batch(1, batch)
        seen = other.read_batch(1, batch.num_tokens, batch.num_seqs, batch.max_seqlen)
        for name in ("input_ids", "positions", "cu_seqlens"):
            np.testing.assert_array_equal(getattr(seen, name), getattr(batch, name))
        assert seen.max_seqlen == 3
        other.output(1)[:2] = [[1, 2, 3], [4, 5, 6]]
        np.testing.assert_array_equal(owner.output(1)[:2], [[1, 2, 3], [4, 5, 6]])
        assert not owner.output(0).any()  # the other slot is untouched
        with pytest.raises(ValueError):
            owner.write_batch(0, pack([np.ones(17, np.int32)]))
    finally:
        del seen
        other.close()
        owner.close()
