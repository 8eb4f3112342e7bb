"""Timing one attention backend on one class of batch (CUDA), for attention_backend "auto".

The batch is laid out as the graph runner lays out a real one of that class (token bucket,
max_seqlen bucket): representative lengths (engine/rose/attention/choice.py), then the
same dummy and empty padding segments. The backend's calls are captured as one small CUDA
graph, as inside the model's graph, so launch costs count as they will there; the time is
the best of a few replays, per call.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from rose_embed.engine.contract.batch import pack_flat
from rose_embed.engine.rose.graphs import _fill_padded, gc_paused, next_power_of_two
from rose_embed.engine.rose.attention.ragged import AttentionShape
from rose_embed.engine.rose.attention.choice import representative_lengths

GRAPH_TARGET_S = 2e-3  # calls per captured graph: about this long, so that event timing is steady
MAX_CALLS = 16
ROUNDS = 3


def padded_cu_seqlens(num_tokens: int, max_seqlen: int, max_num_seqs: int) -> list[int]:
    """cu_seqlens of a representative batch of the class, padded to its graph layout."""
    lengths = np.asarray(representative_lengths(num_tokens, max_seqlen, max_num_seqs), dtype=np.int32)
    batch = pack_flat(np.zeros(int(lengths.sum()), np.int32), lengths)
    num_segments = next_power_of_two(len(lengths) + math.ceil((num_tokens - batch.num_tokens) / max_seqlen))
    ids, positions, segment_ids = (np.zeros(num_tokens, np.int32) for _ in range(3))
    cu_seqlens = np.zeros(num_segments + 1, np.int32)
    _fill_padded(batch, max_seqlen, ids, positions, cu_seqlens, segment_ids)
    return cu_seqlens.tolist()


class AttentionTimer:
    """`timer(backend, num_tokens, max_seqlen)` -> seconds per call; q, k, v made once at the
    largest bucket and sliced (random values: the kernels' speed does not depend on them)."""

    def __init__(self, shape: AttentionShape, dtype: torch.dtype, device: torch.device, max_num_tokens: int,
                 max_num_seqs: int):
        self.max_num_seqs, self.device = max_num_seqs, device
        g = torch.Generator(device=device).manual_seed(0)
        self.q = torch.randn(max_num_tokens, shape.num_heads, shape.head_dim, generator=g, device=device, dtype=dtype)
        self.k, self.v = (torch.randn(max_num_tokens, shape.num_kv_heads, shape.head_dim, generator=g, device=device,
                                      dtype=dtype) for _ in range(2))
        self.pool = torch.cuda.graph_pool_handle()  # freed with the timer
        self.stream = torch.cuda.Stream()
        # Every graph captured lives as long as the timer: once a pool's last graph is gone,
        # capturing into it again trips the caching allocator's assert (use_count > 0).
        self._graphs: list[torch.cuda.CUDAGraph] = []
        self._failed_graphs: list[torch.cuda.CUDAGraph] = []

    @torch.inference_mode()
    def __call__(self, backend, num_tokens: int, max_seqlen: int) -> float:
        cu_host = padded_cu_seqlens(num_tokens, max_seqlen, self.max_num_seqs)
        cu_seqlens = torch.tensor(cu_host, dtype=torch.int32, device=self.device)
        q, k, v = self.q[:num_tokens], self.k[:num_tokens], self.v[:num_tokens]
        key = ("attention-choice", num_tokens, max_seqlen)
        meta = backend.prepare_graph(key, cu_seqlens, cu_host, max_seqlen)
        try:
            backend.forward(q, k, v, meta)  # first call: compiles, allocates, plans
            torch.cuda.synchronize()
            started = time.perf_counter()
            backend.forward(q, k, v, meta)
            torch.cuda.synchronize()
            calls = max(1, min(MAX_CALLS, int(GRAPH_TARGET_S / max(time.perf_counter() - started, 1e-6))))
            graph = self._capture(lambda: self._calls(backend, q, k, v, meta, calls))
            self._graphs.append(graph)
            graph.replay()
            best = math.inf
            for _ in range(ROUNDS):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                graph.replay()
                end.record()
                end.synchronize()
                best = min(best, start.elapsed_time(end) / 1e3 / calls)
            return best
        finally:
            release = getattr(backend, "release_graph", None)
            if release is not None:
                release(key)

    @staticmethod
    def _calls(backend, q, k, v, meta, calls: int) -> None:
        for _ in range(calls):
            # Each output is dropped before the next call, so that the captured calls reuse one
            # block of the graphs' pool: a kept graph holds one call's output, not all of them.
            backend.forward(q, k, v, meta)

    def _capture(self, run) -> torch.cuda.CUDAGraph:
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.stream(self.stream), gc_paused():
                graph.capture_begin(pool=self.pool, capture_error_mode="thread_local")
                try:
                    run()
                finally:
                    graph.capture_end()
        except Exception:
            # As engine/rose/graphs.py does after a failed capture: end it, stop routing allocations
            # to the pool, keep the graph alive (routing filters may still name it) and start
            # a new pool, so that the next candidate's capture works.
            with torch.cuda.stream(self.stream):
                if torch.cuda.is_current_stream_capturing():
                    try:
                        graph.capture_end()
                    except Exception:
                        pass
            self._failed_graphs.append(graph)
            try:
                torch._C._cuda_endAllocateToPool(self.stream.device.index, self.pool)
            except Exception:
                pass
            self.pool = torch.cuda.graph_pool_handle()
            torch.cuda.synchronize()
            raise
        finally:
            torch.cuda.current_stream().wait_stream(self.stream)
        return graph
