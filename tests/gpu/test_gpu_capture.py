"""Lazy CUDA graph capture while other threads keep working, and a capture that fails anyway.

In the server a batch is captured on the engine thread while the readback thread waits on
earlier batches' events and the event loop asks whether they are ready. In CUDA's global
capture mode any of those calls invalidates the capture (and fails itself); in the
thread-local mode the engine uses they are legal. A capture that fails for another reason
must leave nothing broken: its batch is computed eagerly, its key runs eagerly from then
on, and later captures still work. Tolerances as in tests/gpu/test_gpu.py: bf16 vs the eager
run of the same runner >= 0.9999 (replay and eager run the same kernels).
"""

from __future__ import annotations

import logging
import queue
import sys
import threading

import numpy as np
import pytest
import torch

from rose_embed.engine.contract.batch import pack
from tests.gpu.test_gpu import MAX_NUM_TOKENS, MAX_SEQLEN, _bert_config, _hf_bert, _ours, _runner, cosines, needs_cuda

pytestmark = [needs_cuda, pytest.mark.gpu]


def _batches(seed: int, num: int) -> list:
    """Batches of many sizes within the graphs' budget, so that they land in many
    (bucket, segments, max_seqlen) keys and each can be captured."""
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(num):
        lengths = rng.integers(1, int(rng.choice([16, 64, 200, MAX_SEQLEN])), int(rng.integers(1, 64)))
        lengths = lengths[np.cumsum(lengths) <= MAX_NUM_TOKENS]
        batches.append(pack([rng.integers(5, 1024, n, dtype=np.int32) for n in lengths]))
    return batches


def test_captures_are_safe_while_other_threads_wait_on_results():
    model = _ours("bert", _hf_bert(_bert_config(384, 12, layers=4)))
    runner = _runner(model, "varlen", is_causal=False)
    eager = _runner(model, "varlen", is_causal=False, enforce_eager=True)
    batches = _batches(seed=11, num=60)
    order = [i for i in range(len(batches)) for _ in range(3)]  # eager warm-up, capture, replay
    np.random.default_rng(0).shuffle(order)

    launched: queue.SimpleQueue = queue.SimpleQueue()
    outputs: dict[int, list[np.ndarray]] = {i: [] for i in range(len(batches))}
    errors: list[BaseException] = []
    stop = threading.Event()
    finished = torch.cuda.Event()
    finished.record()
    torch.cuda.synchronize()

    def wait_for_results():  # the readback thread: wait on each batch's event, copy out
        while (item := launched.get()) is not None:
            index, lazy = item
            try:
                outputs[index].append(lazy.wait().copy())
            except BaseException as exc:  # noqa: BLE001 - any failure here is the bug
                errors.append(exc)

    def ask_whether_ready():  # the event loop: queries events at any moment
        while not stop.is_set():
            try:
                finished.query()
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                return

    threads = [threading.Thread(target=wait_for_results) for _ in range(2)] + [threading.Thread(target=ask_whether_ready)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # let the other threads in often, mid-capture
    for thread in threads:
        thread.start()
    try:
        for index in order:
            launched.put((index, runner.execute(batches[index])))
    finally:
        sys.setswitchinterval(interval)
        stop.set()
        for _ in range(2):
            launched.put(None)
        for thread in threads:
            thread.join(60)
    assert not errors, errors[:3]
    graphs = runner.graphs
    assert graphs.num_capture_failures == 0
    keys = {graphs.layout(b.num_tokens, b.num_seqs, b.max_seqlen) for b in batches}
    assert None not in keys and len(keys) >= 20
    assert len(graphs.graphs) == len(keys), "every key runs 3 times or more, so each should have been captured"
    for index, batch in enumerate(batches):
        reference = eager.execute(batch).wait()
        assert len(outputs[index]) == 3
        for out in outputs[index]:
            assert cosines(out, reference).min() >= 0.9999


def test_a_failed_capture_runs_eagerly_and_later_captures_still_work(caplog):
    model = _ours("bert", _hf_bert(_bert_config(256, 4)))
    runner = _runner(model, "varlen", is_causal=False)
    eager = _runner(model, "varlen", is_causal=False, enforce_eager=True)
    graphs = runner.graphs
    forward = graphs.forward
    sabotage = {"armed": True}

    def forward_that_breaks_one_capture(*args):
        if sabotage["armed"] and torch.cuda.is_current_stream_capturing():
            sabotage["armed"] = False
            args[2][-1].item()  # a synchronous copy, not allowed while capturing: the capture is invalidated
        return forward(*args)

    graphs.forward = forward_that_breaks_one_capture
    broken, later = pack([np.arange(5, 300, dtype=np.int32)] * 5), pack([np.arange(5, 40, dtype=np.int32)] * 3)
    broken_ref, later_ref = eager.execute(broken).wait(), eager.execute(later).wait()

    with caplog.at_level(logging.WARNING, logger="rose_embed.engine"):
        runs = [runner.execute(broken).wait() for _ in range(4)]  # eager, failed capture (eager), eager, eager
    assert graphs.num_capture_failures == 1 and not graphs.graphs
    assert sum("capture failed" in r.getMessage() for r in caplog.records) == 1
    for out in runs:
        assert cosines(out, broken_ref).min() >= 0.9999

    runs = [runner.execute(later).wait() for _ in range(3)]  # eager, capture, replay
    assert len(graphs.graphs) == 1 and graphs.num_capture_failures == 1
    for out in runs:
        assert cosines(out, later_ref).min() >= 0.9999
    assert cosines(runner.execute(broken).wait(), broken_ref).min() >= 0.9999  # still eager, still right
