"""Joining the batches waiting at an engine into device batches (engine/queue/joined_batches.py)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.rose.batch import pack
from engine.queue.joined_batches import Task, device_batch, group_tasks, rows_per_task


def _task(lengths: list[int], front_end: str = "a", segments=None) -> Task:
    rng = np.random.default_rng(sum(lengths))
    return Task(front_end, 0, pack([rng.integers(5, 99, n).astype(np.int32) for n in lengths], segments))


def test_groups_keep_the_order_and_stay_within_the_token_and_sequence_budget():
    tasks = [_task([300]), _task([200, 100]), _task([500]), _task([10] * 6), _task([1000])]
    groups = group_tasks(tasks, max_tokens=1024, max_seqs=8)
    assert [t for g in groups for t in g] == tasks
    for group in groups:
        batch = device_batch(group)
        assert batch.num_tokens <= 1024 and batch.num_seqs <= 8
    # 300 + 300 tokens; 500 more would pass 1024: then 500 + 60 tokens in 7 sequences; 1000 more would pass 1024
    assert [len(g) for g in groups] == [2, 2, 1]


def test_a_lone_task_runs_its_own_views_and_a_group_runs_one_joined_batch():
    first, second = _task([3, 4], "a"), _task([5], "b")
    assert device_batch([first]) is first.batch
    joined = device_batch([first, second])
    assert joined.num_seqs == 3 and joined.num_tokens == 12
    assert np.array_equal(joined.input_ids, np.concatenate([first.batch.input_ids, second.batch.input_ids]))
    assert joined.cu_seqlens.tolist() == [0, 3, 7, 12] and joined.positions.tolist()[7:] == [0, 1, 2, 3, 4]
    assert joined.max_seqlen == 5


def test_each_task_gets_its_own_rows_back_with_segments_counted():
    plain = _task([4, 4], "a")  # two vectors
    chunked = _task([6], "b", segments=[np.array([-1, 0, 0, 1, 1, -1], np.int32)])  # one sequence, two vectors
    last = _task([2], "c")
    group = [plain, chunked, last]
    joined = device_batch(group)
    assert joined.num_outputs == 5
    assert joined.pooling_ids().tolist() == [0] * 4 + [1] * 4 + [-1, 2, 2, 3, 3, -1] + [4, 4]
    rows = np.arange(5 * 3, dtype=np.float32).reshape(5, 3)
    handed = {task.front_end: own for task, own in rows_per_task(group, rows)}
    assert np.array_equal(handed["a"], rows[:2]) and np.array_equal(handed["b"], rows[2:4])
    assert np.array_equal(handed["c"], rows[4:])


def test_a_task_that_could_not_be_read_is_a_group_of_its_own_and_raises_its_error():
    unread = Task("b", 1, None, ValueError("a batch of 9999 tokens does not fit a slot"))
    tasks = [_task([3]), unread, _task([4]), _task([5])]
    groups = group_tasks(tasks, max_tokens=1024, max_seqs=8)
    assert [len(g) for g in groups] == [1, 1, 2] and groups[1] == [unread]
    with pytest.raises(ValueError, match="does not fit"):
        device_batch([unread])
