"""Joining the batches that front ends sent an engine into fewer, larger device batches.

Each front end cuts its batches from its own queue, so with several front ends an engine
process receives many small batches at once while the device is busy: the sum of what every
front end had queued, cut into as many pieces as there are front ends. The engine worker
(engine/queue/engine_worker.py) takes every batch waiting when it looks, joins them into as few
device batches as the token and sequence budget allows, and hands each front end its own
rows of the result. The device runs large batches faster per token, and no batch ever waits
for one that has not arrived.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from engine.rose.batch import PackedBatch, join_packed


@dataclass(eq=False)
class Task:
    """One front end's batch, as it lies in the slot the front end wrote it to."""

    front_end: object
    slot: int
    batch: PackedBatch | None
    error: Exception | None = None  # why its batch could not be read (then it runs alone, and fails)


def group_tasks(tasks: list[Task], max_tokens: int, max_seqs: int) -> list[list[Task]]:
    """Consecutive runs of tasks, in order, each within the budget (a task alone always fits:
    its front end cut it within the same budget); a task with an error is a group of its own."""
    groups: list[list[Task]] = []
    tokens = seqs = outputs = 0
    for task in tasks:
        batch = task.batch
        joins = (groups and task.error is None and groups[-1][-1].error is None
                 and tokens + batch.num_tokens <= max_tokens and seqs + batch.num_seqs <= max_seqs
                 and outputs + batch.num_outputs <= max_seqs)
        if not joins:
            groups.append([])
            tokens = seqs = outputs = 0
        groups[-1].append(task)
        if batch is not None:
            tokens, seqs, outputs = tokens + batch.num_tokens, seqs + batch.num_seqs, outputs + batch.num_outputs
    return groups


def device_batch(group: list[Task]) -> PackedBatch:
    """The group as one batch; a lone task's is its slot's own views (no copy). Raises a task's error."""
    if group[0].error is not None:
        raise group[0].error
    return group[0].batch if len(group) == 1 else join_packed(*(task.batch for task in group))


def rows_per_task(group: list[Task], rows: np.ndarray | None) -> Iterator[tuple[Task, np.ndarray | None]]:
    """Each task with its own rows of the group's vectors (its batch's, in order); None for
    every task where the group failed (no rows)."""
    start = 0
    for task in group:
        if rows is None:
            yield task, None
            continue
        end = start + task.batch.num_outputs
        yield task, rows[start:end]
        start = end
