"""bench/cpu_compare.py's disturbance rule: what other processes did while a run ran, and which runs count."""

from __future__ import annotations

import itertools

import pytest

from bench import cpu_compare


def test_other_load_is_the_machines_cpu_time_less_this_process_trees(monkeypatch):
    busy = iter([100.0, 103.0])  # the machine: 3 CPU seconds busy during the block
    ours = iter([40.0, 41.8])  # this process and its descendants: 1.8 of them
    clock = itertools.count(start=0.0, step=2.0)  # the block lasts 2 s
    monkeypatch.setattr(cpu_compare, "machine_busy_seconds", lambda: next(busy))
    monkeypatch.setattr(cpu_compare, "process_cpu_seconds", lambda pid: next(ours))
    monkeypatch.setattr(cpu_compare.time, "perf_counter", lambda: next(clock))
    with cpu_compare.Timed() as timed:
        pass
    assert timed.seconds == 2.0
    assert timed.other_load == pytest.approx(0.6)  # (3 - 1.8) / 2 cores


def test_disturbed_runs_do_not_count():
    assert cpu_compare.kept_runs([1.0, 1.5, 1.1], [0.02, 0.8, 0.1], 0.1) == [1.0, 1.1]


def test_busy_seconds_come_from_proc_stat():
    first = cpu_compare.machine_busy_seconds()
    assert first > 0 and cpu_compare.machine_busy_seconds() >= first
