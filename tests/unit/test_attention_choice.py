"""--attention-backend auto's choice per class of batch, on fake backends with fake timings (CPU).

The timings themselves come from the GPU (tests/gpu/test_packed_attention_gpu.py runs the real
choice); here: which backend wins, the margin that keeps the default, the time budget, a
candidate that fails, the dispatch of each graph to its class's backend, the representative
batch each class is timed on, and the table in /metrics (one engine, several, merged).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from rose_embed.engine.rose.graphs import CUDAGraphRunner, GraphKey
from rose_embed.engine.rose.attention.choice import AutoAttentionBackend, pick_fastest, representative_lengths


class FakeBackend:
    def __init__(self, name: str, num_graph_slots: int = 1, fails: bool = False):
        self.name, self.num_graph_slots, self.fails = name, num_graph_slots, fails
        self.shape = None
        self.prepared: list = []

    def prepare(self, cu_seqlens, cu_seqlens_host, max_seqlen):
        return ("eager", self.name)

    def prepare_graph(self, key, cu_seqlens, cu_seqlens_host, max_seqlen):
        self.prepared.append(key)
        return ("graph", self.name)

    def forward(self, q, k, v, meta, local=False, position_bias=None):
        assert meta[1] == self.name  # the meta of the backend that runs
        return self.name


def fake_times(table: dict[tuple[int, int], dict[str, float]]):
    """A timer answering from a table: seconds per call of each backend on each class."""
    def time_one(backend, num_tokens, max_seqlen):
        if backend.fails:
            raise RuntimeError("no kernel image for this device")
        return table[num_tokens, max_seqlen][backend.name]
    return time_one


def test_pick_fastest_keeps_the_default_within_the_margin():
    assert pick_fastest({"varlen": 1.0, "packed": 0.5}, "varlen") == "packed"
    assert pick_fastest({"varlen": 1.0, "packed": 0.98}, "varlen") == "varlen"  # 2 %: noise
    assert pick_fastest({"varlen": 1.0, "packed": 0.96}, "varlen") == "packed"
    assert pick_fastest({"varlen": 0.5, "packed": 1.0}, "varlen") == "varlen"
    assert pick_fastest({"packed": 1.0}, "varlen") == "packed"  # the default did not run
    assert pick_fastest({}, "varlen") == "varlen"


def test_each_class_gets_its_fastest_backend():
    varlen, packed, flashinfer = FakeBackend("varlen"), FakeBackend("packed"), FakeBackend("flashinfer", 2)
    auto = AutoAttentionBackend([varlen, packed, flashinfer])
    times = {
        (1024, 128): {"varlen": 40e-6, "packed": 15e-6, "flashinfer": 30e-6},  # short texts: packed
        (1024, 512): {"varlen": 50e-6, "packed": 70e-6, "flashinfer": 45e-6},  # long: flashinfer
        (2048, 512): {"varlen": 90e-6, "packed": 120e-6, "flashinfer": 89e-6},  # within the margin: varlen
    }
    auto.choose(list(times), fake_times(times))
    assert auto.table == {(1024, 128): "packed", (1024, 512): "flashinfer", (2048, 512): "varlen"}
    assert auto.backend_for(1024, 128) is packed and auto.backend_for(4096, 128) is varlen  # untimed: default
    assert auto.slots_for(1024, 512) == 2 and auto.slots_for(1024, 128) == 1 and auto.num_graph_slots == 2
    assert auto.table_rows() == [("1024", "128", "packed"), ("1024", "512", "flashinfer"),
                                 ("2048", "512", "varlen"), ("other", "other", "varlen")]
    log = auto.describe()
    assert "1024 tokens" in log and "<=128: packed" in log and "<=512: flashinfer" in log and "2048 tokens" in log


def test_a_failing_candidate_is_dropped_and_a_failing_default_raises():
    broken = FakeBackend("packed", fails=True)
    auto = AutoAttentionBackend([FakeBackend("varlen"), broken])
    times = {(64, 64): {"varlen": 1.0}, (128, 128): {"varlen": 1.0}}
    auto.choose(list(times), fake_times(times))
    assert list(auto.candidates) == ["varlen"] and set(auto.table.values()) == {"varlen"}
    with pytest.raises(RuntimeError):
        AutoAttentionBackend([FakeBackend("varlen", fails=True), FakeBackend("packed")]).choose(
            [(64, 64)], fake_times({(64, 64): {"packed": 1.0}}))


def test_classes_past_the_time_budget_keep_the_default():
    clock = iter(range(100))  # each reading one second later
    auto = AutoAttentionBackend([FakeBackend("varlen"), FakeBackend("packed")])
    classes = [(64 * 2**i, 64) for i in range(10)]
    auto.choose(classes, lambda backend, t, s: {"varlen": 2.0, "packed": 1.0}[backend.name], budget_s=3.5,
                clock=lambda: next(clock))
    assert 0 < len(auto.table) < len(classes)
    assert all(name == "packed" for name in auto.table.values())
    assert auto.backend_for(*classes[-1]).name == "varlen"


def test_graphs_of_a_class_run_its_backend_with_its_slots():
    """The graph runner asks auto for each class's backend: keys name it, FlashInfer's keys
    alternate two slots, the others keep one; eager runs (no graph) use the default."""
    varlen, packed, flashinfer = FakeBackend("varlen"), FakeBackend("packed"), FakeBackend("flashinfer", 2)
    auto = AutoAttentionBackend([varlen, packed, flashinfer])
    auto.table = {(1024, 128): "packed", (1024, 512): "flashinfer"}
    graphs = CUDAGraphRunner(None, auto, None, max_num_tokens=2048, max_num_seqs=64, max_seqlen=512)
    assert graphs._backend_for(1024, 128) == ("packed", 1)
    assert graphs._backend_for(1024, 512) == ("flashinfer", 2)
    assert graphs._backend_for(2048, 256) == ("varlen", 1)
    meta = auto.prepare_graph(GraphKey(1024, 16, 128, 0, "packed"), None, [], 128)
    assert auto.forward(None, None, None, meta) == "packed" and packed.prepared
    assert auto.forward(None, None, None, auto.prepare(None, [], 10)) == "varlen"
    assert (2048, 512) in graphs.graph_classes() and (64, 64) in graphs.graph_classes()
    assert all(s <= t for t, s in graphs.graph_classes())


@pytest.mark.parametrize("num_tokens,max_seqlen,max_num_seqs", [(64, 64, 512), (1024, 128, 512), (16384, 128, 512),
                                                                 (16384, 512, 512), (3072, 512, 4)])
def test_a_class_is_timed_on_a_batch_of_that_class(num_tokens, max_seqlen, max_num_seqs):
    """Lengths from 8 up to the class's longest, laid out as the graph runner lays out a real
    batch of the class (same token bucket, max_seqlen bucket and segment count)."""
    from rose_embed.engine.rose.attention.timing import padded_cu_seqlens

    lengths = representative_lengths(num_tokens, max_seqlen, max_num_seqs)
    assert max(lengths) == max_seqlen if max_seqlen > 128 else max(lengths) <= max_seqlen
    assert min(lengths) >= min(8, max_seqlen)
    assert sum(lengths) <= num_tokens and len(lengths) <= max_num_seqs
    assert len(set(lengths)) >= min(3, len(lengths))  # a spread, not one length
    graphs = CUDAGraphRunner(None, FakeBackend("varlen"), None, max_num_tokens=16384, max_num_seqs=max_num_seqs,
                             max_seqlen=512)
    cu = np.asarray(padded_cu_seqlens(num_tokens, max_seqlen, max_num_seqs))
    bucket, num_segments, chunk = graphs.layout(sum(lengths), len(lengths), max(lengths))
    assert chunk == max_seqlen and cu[-1] == num_tokens
    if len(lengths) < max_num_seqs:  # the bucket filled: exactly a real batch's layout
        assert bucket == num_tokens and len(cu) == num_segments + 1
    else:  # too few sequences to fill it: padded up to the class's bucket all the same
        assert len(cu) - 1 == 1 << (len(cu) - 2).bit_length()
    assert list(np.diff(cu)[: len(lengths)]) == lengths and np.diff(cu).max() <= max_seqlen


def test_attention_table_travels_from_the_engine_to_metrics():
    from prometheus_client import generate_latest

    from rose_embed.engine.queue.engine_loop import _attention_table
    from rose_embed.server.metrics.prometheus import _attention_backends, _Fixed

    engine = SimpleNamespace(runner=SimpleNamespace(attention_table=lambda: [["1024", "128", "packed"]]))
    assert _attention_table(engine) == [("1024", "128", "packed")]  # what the Ready message carries
    assert _attention_table(SimpleNamespace()) == []  # a fake engine with no runner
    links = [SimpleNamespace(index=0, attention_table=[("any", "any", "varlen")]),
             SimpleNamespace(index=1, attention_table=[("64", "64", "packed")])]
    out = generate_latest(_Fixed([_attention_backends(links)])).decode()
    assert 'rose_attention_backend{backend="varlen",bucket="any",engine="0",max_seqlen="any"} 1.0' in out
    assert 'rose_attention_backend{backend="packed",bucket="64",engine="1",max_seqlen="64"} 1.0' in out


def test_cpu_runner_reports_its_one_backend():
    import torch

    from rose_embed.engine.rose.attention.ragged import AttentionShape
    from rose_embed.engine.rose.attention.backends import make_attention_backend
    from rose_embed.engine.rose.runner import ModelRunner

    attention = make_attention_backend("auto", AttentionShape(2, 2, 8, False), torch.device("cpu"))
    runner = ModelRunner(torch.nn.Linear(1, 1), None, attention, torch.device("cpu"), max_num_tokens=64,
                         max_num_seqs=4, max_seqlen=32)
    assert attention.name in ("native", "sdpa")  # the C kernel where it builds (docs/cpu-attention.md)
    assert runner.attention_table() == [("any", "any", attention.name)]
    assert runner.choose_attention() is None  # nothing to choose on the CPU
