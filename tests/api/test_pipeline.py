"""The loop behind Engine.embed and the corpus job (engine/rose/pipeline.py): tokenized in threads,
vectors in input order, batches as a whole-list cut gives them, errors and Ctrl-C in the caller."""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest

from rose_embed.engine.contract.batch import batch_ranges, cut_batches, pack
from rose_embed.engine.contract.config import EngineConfig
from rose_embed.engine.text.long_inputs import InputTooLongError, fit_texts
from rose_embed.engine.rose.pipeline import embed_stream, embed_texts
from tests.support.fake_engine import FakeEngine

THREAD_PREFIXES = ("rose-tokenizer", "rose-embed-feeder")


class _BudgetedFake(FakeEngine):
    """The fake engine with the budget the loop reads, its tokenizer slowed at random per piece
    (so that later pieces are often ready first), and a failure where a text says so."""

    def __init__(self, max_batch_tokens: int, max_batch_seqs: int):
        super().__init__()
        self.config = EngineConfig(device="cpu", max_batch_tokens=max_batch_tokens, max_batch_seqs=max_batch_seqs)
        self.pieces: list[int] = []
        tokenizer, encode_packed, rng = self.tokenizer, self.tokenizer.encode_packed, random.Random(0)

        def slowed(texts):
            time.sleep(rng.uniform(0, 0.01))
            if "poison" in texts:
                raise UnicodeError("the tokenizer choked on a piece")
            self.pieces.append(len(texts))
            return encode_packed(texts)

        tokenizer.encode_packed = slowed


def _texts(num: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = "the quick brown fox jumps over a lazy dog while seven wizards quietly hex".split()
    return [" ".join(rng.choices(words, k=rng.randint(1, 40))) for _ in range(num)]


def _threads_left() -> list[str]:
    deadline = time.monotonic() + 5
    while True:
        left = [t.name for t in threading.enumerate() if t.name.startswith(THREAD_PREFIXES)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.01)


@pytest.mark.parametrize("num_threads", [3, 0])  # 0: tokenized in the caller's thread
def test_items_come_back_in_order_with_their_own_vectors_and_batches(num_threads):
    engine = _BudgetedFake(max_batch_tokens=120, max_batch_seqs=6)
    items = [(f"item-{i}", _texts(n, seed=i)) for i, n in enumerate([23, 0, 1, 64, 9, 40])]
    landed: list[int] = []
    out = list(embed_stream(engine, items, on_batch=landed.append, num_threads=num_threads, piece_texts=5))

    assert [tag for tag, _ in out] == [tag for tag, _ in items]
    for (_, texts), (_, vectors) in zip(items, out):
        assert vectors.shape == (len(texts), engine.dimensions) and vectors.dtype == np.float32
        np.testing.assert_array_equal(vectors, engine.embed(texts) if texts else vectors)
    assert max(engine.pieces) == 5 and sum(engine.pieces) == sum(len(t) for _, t in items)
    # Each item is cut as the whole list would be, across its pieces and never across items.
    expected = [hi - lo for _, texts in items if texts
                for lo, hi in cut_batches([len(s) for s in engine.tokenize(texts)], 120, 6)]
    assert [num_seqs for num_seqs, _ in engine.batches] == expected == landed
    assert _threads_left() == []


def test_embed_texts_gives_the_list_s_vectors_and_an_empty_list_none():
    engine = _BudgetedFake(max_batch_tokens=300, max_batch_seqs=512)
    texts = _texts(100, seed=7)
    np.testing.assert_array_equal(embed_texts(engine, texts, num_threads=2, piece_texts=16), engine.embed(texts))
    assert _threads_left() == []  # the pool's threads wind down after the call returns
    started = threading.active_count()
    np.testing.assert_array_equal(embed_texts(engine, texts), engine.embed(texts))  # one piece: no thread
    assert threading.active_count() == started and engine.pieces[-1] == 100
    assert embed_texts(engine, []).shape == (0, engine.dimensions)


@pytest.mark.parametrize("num_threads", [4, 0])
def test_a_tokenizer_error_is_raised_in_the_caller_after_the_items_before_it(num_threads):
    engine = _BudgetedFake(max_batch_tokens=200, max_batch_seqs=512)
    items = [(i, _texts(12, seed=i)) for i in range(3)] + [(3, ["fine", "poison"])] + [(4, _texts(12, seed=4))]
    done = []
    with pytest.raises(UnicodeError, match="choked"):
        for tag, _ in embed_stream(engine, items, num_threads=num_threads, piece_texts=4):
            done.append(tag)
    assert done == [0, 1, 2]
    assert _threads_left() == []


def test_an_error_of_the_input_itself_is_raised_in_the_caller():
    def items():
        yield "a", ["first text"]
        raise OSError("the disk went away")

    engine = _BudgetedFake(max_batch_tokens=200, max_batch_seqs=512)
    stream = embed_stream(engine, items(), num_threads=2)
    assert next(stream)[0] == "a"
    with pytest.raises(OSError, match="disk went away"):
        next(stream)
    assert _threads_left() == []


@pytest.mark.parametrize("where", ["device", "progress"])
def test_ctrl_c_stops_the_threads_and_reaches_the_caller(where):
    engine = _BudgetedFake(max_batch_tokens=64, max_batch_seqs=4)
    executed, real = [0], engine.execute_packed

    def execute_packed(batch):
        executed[0] += 1
        if where == "device" and executed[0] == 5:
            raise KeyboardInterrupt
        return real(batch)

    def on_batch(num_texts):
        if where == "progress" and executed[0] >= 5:
            raise KeyboardInterrupt

    engine.execute_packed = execute_packed
    endless = ((i, _texts(50, seed=i)) for i in range(10**6))  # the interrupt, not the input, ends it
    with pytest.raises(KeyboardInterrupt):
        for _ in embed_stream(engine, endless, on_batch=on_batch, num_threads=3, piece_texts=8):
            pass
    assert _threads_left() == []
    assert sum(engine.pieces) < 100 * 8  # tokenizing stopped a few pieces ahead, not at the input's end


def test_closing_the_stream_early_stops_the_threads_and_closes_the_input():
    closed = threading.Event()

    def items():
        try:
            for i in range(10**6):
                yield i, _texts(20, seed=i)
        finally:
            closed.set()

    engine = _BudgetedFake(max_batch_tokens=200, max_batch_seqs=512)
    stream = embed_stream(engine, items(), num_threads=2, piece_texts=10)
    assert [next(stream)[0] for _ in range(3)] == [0, 1, 2]
    stream.close()
    assert _threads_left() == [] and closed.wait(5)


def _long(seed: int) -> str:
    return " ".join(_texts(60, seed))  # several hundred tokens: past the limit of 256


def test_long_inputs_are_cut_into_windows_piece_by_piece_as_for_the_whole_list():
    """chunk mode: an over-long text's windows are embedded and combined within its piece;
    the vectors are those of fitting each item at once, and the progress counts texts."""
    engine = _BudgetedFake(max_batch_tokens=600, max_batch_seqs=512)
    items = [("a", ["short", _long(1), "another", _long(2), _long(3)]), ("b", []), ("c", [_long(4), "last"])]
    landed: list[int] = []
    out = list(embed_stream(engine, items, on_batch=landed.append, prompt="query: ", long_inputs="chunk",
                            num_threads=3, piece_texts=2))
    assert [tag for tag, _ in out] == ["a", "b", "c"]
    for (_, texts), (_, vectors) in zip(items, out):
        if not texts:
            assert vectors.shape == (0, engine.dimensions)
            continue
        prompted = ["query: " + t for t in texts]
        fitted = fit_texts(engine.tokenizer, "chunk", texts, "query: ", engine.tokenize(prompted))
        assert len(fitted.seqs) > len(texts)  # windows really were made
        np.testing.assert_allclose(vectors, fitted.combine(engine.vectors_of(fitted.seqs), True), atol=1e-6)
        assert not np.allclose(vectors, engine.embed(prompted), atol=1e-3)  # not what truncation gives
    assert sum(landed) == sum(len(t) for _, t in items)


def test_a_text_too_long_is_refused_with_its_place_in_the_stream():
    engine = _BudgetedFake(max_batch_tokens=600, max_batch_seqs=512)
    items = [("a", ["short", "fine"]), ("b", ["ok", "ok", "ok", _long(5)])]
    done = []
    with pytest.raises(InputTooLongError) as exc:
        for tag, vectors in embed_stream(engine, items, long_inputs="error", num_threads=2, piece_texts=3):
            done.append(tag)
    assert done == ["a"] and exc.value.index == 5 and exc.value.num_tokens > 256
    assert _threads_left() == []


@pytest.mark.parametrize("seed", range(30))
def test_batch_ranges_cut_as_a_batch_fills(seed):
    """The search-based cut equals the greedy one, step by step (a longer sequence alone)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 400, int(rng.integers(1, 300))).tolist()
    max_tokens, max_seqs = int(rng.integers(1, 1500)), int(rng.integers(1, 40))
    greedy, lo, tokens = [], 0, 0
    for i, n in enumerate(lengths):
        if i > lo and (tokens + n > max_tokens or i - lo >= max_seqs):
            greedy.append((lo, i))
            lo, tokens = i, 0
        tokens += n
    greedy.append((lo, len(lengths)))
    assert cut_batches(lengths, max_tokens, max_seqs) == greedy
    batch = pack([np.ones(n, np.int32) for n in lengths])
    assert batch_ranges(batch.cu_seqlens, max_tokens, max_seqs) == greedy


def test_engine_embed_gives_the_old_path_s_vectors_bit_for_bit(default_engine, texts, monkeypatch):
    """Tokenize everything, cut the whole list, run batch by batch: what Engine.embed did before
    its loop overlapped them. Same batches on the CPU, so the same bits."""
    from dataclasses import replace

    sample = texts[:150] + ["\n\n".join(texts[i : i + 16]) for i in range(1000, 1160, 16)]  # past 256 tokens too
    monkeypatch.setattr(default_engine, "config", replace(default_engine.config, max_batch_tokens=1024))
    seqs = default_engine.tokenize(sample)
    ranges = cut_batches([len(s) for s in seqs], 1024, default_engine.config.max_batch_seqs)
    assert len(ranges) > 4
    old = np.concatenate([default_engine.execute(seqs[lo:hi]).wait() for lo, hi in ranges])

    np.testing.assert_array_equal(default_engine.embed(sample), old)
    np.testing.assert_array_equal(embed_texts(default_engine, sample, num_threads=3, piece_texts=13), old)


def test_tokenizer_processes_give_the_threads_vectors_errors_and_windows():
    """Pieces tokenized by spawned copies of the tokenizer (as for a GPU where the tokenizer
    holds the GIL): the same vectors, windows and errors as the threads', the pool kept."""
    from rose_embed.engine.rose import tokenizer_processes

    engine = FakeEngine()
    items = [(i, _texts(n, seed=i)) for i, n in enumerate([70, 0, 9, 130])]
    by_threads = list(embed_stream(engine, items, num_threads=2, num_processes=0, piece_texts=16))
    by_processes = list(embed_stream(engine, items, num_processes=2, piece_texts=16))
    assert [tag for tag, _ in by_processes] == [0, 1, 2, 3]
    for (_, ours), (_, theirs) in zip(by_processes, by_threads):
        np.testing.assert_array_equal(ours, theirs)

    long_items = [("a", ["short", _long(1), "another"]), ("b", [_long(2), "last"])]
    chunked = list(embed_stream(engine, long_items, long_inputs="chunk", num_processes=2, piece_texts=2))
    reference = list(embed_stream(engine, long_items, long_inputs="chunk", num_processes=0, piece_texts=2))
    for (_, ours), (_, theirs) in zip(chunked, reference):
        np.testing.assert_array_equal(ours, theirs)

    done = []
    with pytest.raises(InputTooLongError) as exc:
        for tag, _ in embed_stream(engine, [("a", ["fine"] * 5), ("b", ["ok", _long(5)])], long_inputs="error",
                                   num_processes=2, piece_texts=3):
            done.append(tag)
    assert done == ["a"] and exc.value.index == 6 and exc.value.num_tokens > 256
    assert len(tokenizer_processes._pools) == 1  # one pool for the tokenizer, reused by every call

    # Closed early: the pieces not yet started are cancelled, and the pool serves the next call.
    stream = embed_stream(engine, [(i, _texts(40, seed=i)) for i in range(20)], num_processes=2, piece_texts=8)
    assert next(stream)[0] == 0
    stream.close()
    np.testing.assert_array_equal(embed_texts(engine, items[3][1], num_processes=2, piece_texts=16), by_threads[3][1])
    tokenizer_processes.close_all()
    assert not tokenizer_processes._pools


def test_tokenizer_processes_get_one_small_piece_each_then_large_ones():
    """A piece's trip through the process pool costs the caller about the same whatever its
    size: once each process has had a small first piece (the device starts as soon), pieces
    are `process_piece_texts` long. The stream's indices and vectors do not change."""
    from rose_embed.engine.rose import pipeline, tokenizer_processes

    started = []

    def start(texts, first):
        started.append((first, len(texts)))
        return first

    items = [("a", _texts(20, seed=0)), ("b", _texts(70, seed=1))]
    list(pipeline._submitted(items, start, pipeline._piece_sizes(8, 24, 2)))
    assert started == [(0, 8), (8, 8), (16, 4), (20, 24), (44, 24), (68, 22)]
    started.clear()
    list(pipeline._submitted(items, start, pipeline._piece_sizes(8, 24, 0)))
    assert [size for _, size in started] == [8, 8, 4] + [8] * 8 + [6]

    engine = FakeEngine()
    by_processes = list(embed_stream(engine, items, num_processes=2, piece_texts=8, process_piece_texts=24))
    by_threads = list(embed_stream(engine, items, num_threads=2, num_processes=0, piece_texts=8))
    for (ours_tag, ours), (theirs_tag, theirs) in zip(by_processes, by_threads, strict=True):
        assert ours_tag == theirs_tag
        np.testing.assert_array_equal(ours, theirs)
    tokenizer_processes.close_all()


def test_processes_only_for_a_gil_holding_tokenizer_before_a_device_with_cores(monkeypatch):
    from rose_embed.engine.rose import tokenizer_processes

    engine = FakeEngine()
    assert engine.tokenizer.holds_the_gil  # the default model's WordPiece runs the ASCII fast path
    monkeypatch.setattr(tokenizer_processes.os, "sched_getaffinity", lambda pid: set(range(16)))
    assert tokenizer_processes.default_num_processes(engine.tokenizer, "cuda") == 8
    assert tokenizer_processes.default_num_processes(engine.tokenizer, "cpu") == 0
    monkeypatch.setattr(tokenizer_processes.os, "sched_getaffinity", lambda pid: {0, 1})
    assert tokenizer_processes.default_num_processes(engine.tokenizer, "cuda") == 0
    monkeypatch.setattr(type(engine.tokenizer), "holds_the_gil", property(lambda self: False))
    monkeypatch.setattr(tokenizer_processes.os, "sched_getaffinity", lambda pid: set(range(16)))
    assert tokenizer_processes.default_num_processes(engine.tokenizer, "cuda") == 0


def test_a_short_list_starts_no_tokenizer_processes(monkeypatch):
    """Their start costs about what a thread takes to tokenize PROCESSES_MIN_CHARS of text."""
    from rose_embed.engine.rose import tokenizer_processes

    monkeypatch.setattr(tokenizer_processes, "default_num_processes", lambda tokenizer, device_type: 2)
    engine = FakeEngine()
    texts = _texts(300, seed=1)  # more than one piece, far less text than the bound
    np.testing.assert_array_equal(embed_texts(engine, texts), engine.embed(texts))
    assert not tokenizer_processes._pools


def test_a_tokenizer_process_imports_no_torch():
    import subprocess
    import sys
    from pathlib import Path

    code = "import sys, rose_embed.engine.rose.tokenizer_processes; print('torch' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert run.stdout.strip() == "False"
