"""Whole-model CUDA graphs per token bucket: bucket list, static buffers, pad, copy, replay, slice.

A graph is keyed by its padded shape: (num_tokens, num_segments, max_seqlen[, slot]), and
named by the attention backend it runs (attention_backend "auto" picks one per
(num_tokens, max_seqlen) class at warm-up, engine/rose/attention/choice.py).
Token counts are padded up to a bucket (64, 128, ... 1024, then steps of 1024) by
trailing dummy segments of at most max_seqlen tokens each, the segment count up to a power
of two by zero-length segments, and max_seqlen (baked into the attention launch) up to a
power of two from 128, so that every batch of a key has the same shapes. max_seqlen is part
of the key because FlashAttention's varlen grid is (max_seqlen / 128) x segments x heads:
baking the model's limit (512, or 32768 for Qwen3) into every graph would launch mostly
empty blocks for batches of short texts. The graph pools one vector per segment of the key
(engine/contract/batch.py's pooling segments, which the per-token segment ids name; padding tokens
belong to none), so a batch whose late-chunked documents pool more vectors than it has
sequences takes a key with enough segments: the count of vectors is bounded as the count of
sequences is, and the keys are the same. Lazy
capture: the first batch of a key runs eagerly on the padded shapes (warm-up: cuBLAS
heuristics, lazy library init), the second is captured, later ones replay. All graphs
share one memory pool: they never run at the same time, so their activations can overlap.

A capture happens while other threads keep working (the readback thread waits on events,
the event loop asks whether a result is ready). It runs in thread-local capture mode, so
their CUDA calls are legal meanwhile; in the default global mode any of them would
invalidate the capture. Should a capture fail anyway, its graph is dropped, the memory
pool's recording to it is ended, later captures use a fresh pool, and that key runs
eagerly from then on: the batch being captured is computed eagerly and nothing fails.
Replays of a key are bit-for-bit those of its eager run except for mean pooling's atomic
adds (~1e-7 relative, see layers/pooling.py).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from rose_embed.engine.contract.batch import PackedBatch

logger = logging.getLogger("rose_embed.engine")

MIN_BUCKET = 64
BUCKET_STEP = 1024
MIN_SEQLEN_BUCKET = 128  # FlashAttention's query tile: shorter buckets would launch the same grid


def token_buckets(max_num_tokens: int, min_bucket: int = MIN_BUCKET, step: int = BUCKET_STEP) -> list[int]:
    """Powers of two from `min_bucket` up to `step`, then multiples of `step`, up to max_num_tokens.

    Pure powers of two would pad a batch of 10k tokens (512 short queries) to 16k; steps of
    1024 above 1024 keep the padding under 1024 tokens where batches are large.
    """
    buckets, size = [], min_bucket
    while size < min(step, max_num_tokens):
        buckets.append(size)
        size *= 2
    while size < max_num_tokens:
        buckets.append(size)
        size += step
    buckets.append(max_num_tokens)
    return buckets


def next_power_of_two(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


class StaticInputs:
    """One device int32 buffer that every batch's inputs are copied into.

    A batch of layout (num_tokens T, num_segments S) occupies [ids: T | positions: T |
    segment_ids: T | cu_seqlens: S+1] at the buffer's start, so a graph sees the same
    addresses on every replay, and one asynchronous copy moves all four. The host side is a ring of pinned
    staging buffers: a slot is refilled only once the copy out of it has run (an event),
    which only waits when the host is a full ring of batches ahead of the device.
    """

    def __init__(self, max_num_tokens: int, max_num_segments: int, device: torch.device, num_slots: int = 3):
        self.capacity = 3 * max_num_tokens + max_num_segments + 1
        self.device_buffer = torch.zeros(self.capacity, dtype=torch.int32, device=device)
        self._staging = [torch.zeros(self.capacity, dtype=torch.int32, pin_memory=True) for _ in range(num_slots)]
        self._copied: list[torch.cuda.Event | None] = [None] * num_slots
        self._turn = 0

    @staticmethod
    def _views(buffer, t: int, num_segments: int) -> tuple:
        return buffer[:t], buffer[t : 2 * t], buffer[3 * t : 3 * t + num_segments + 1], buffer[2 * t : 3 * t]

    def host_views(self, num_tokens: int, num_segments: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(input_ids [T], positions [T], cu_seqlens [S+1], segment_ids [T]) to fill, in the
        next staging slot."""
        event = self._copied[self._turn]
        if event is not None and not event.query():
            event.synchronize()  # flow control only: the ring is full
        return self._views(self._staging[self._turn].numpy(), num_tokens, num_segments)

    def upload(self, num_tokens: int, num_segments: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Copy the filled slot to the device (async) and return the device views."""
        used = 3 * num_tokens + num_segments + 1
        self.device_buffer[:used].copy_(self._staging[self._turn][:used], non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self._copied[self._turn] = event
        self._turn = (self._turn + 1) % len(self._staging)
        return self._views(self.device_buffer, num_tokens, num_segments)


@dataclass(frozen=True)
class GraphKey:
    num_tokens: int  # the token bucket
    num_segments: int  # real + padding segments (cu_seqlens has one more entry); also the vectors pooled
    max_seqlen: int  # longest segment allowed, padding included
    slot: int  # which of the backend's graph slots (FlashInfer alternates two)
    backend: str = ""  # the attention backend its graph runs ("auto" picks one per class)
    mode: int = 0  # what the head computes, where it has several modes (engine/rose/layers/maxsim_head.py)


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    output: torch.Tensor  # [num_segments, dim] float32, rewritten by each replay


# forward(input_ids, positions, cu_seqlens, segment_ids, num_segments, attention_meta, head_mode)
#   -> pooled vectors [num_segments, dim]
ForwardFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int, object, int], torch.Tensor]


class CUDAGraphRunner:
    """Pads a batch to its bucket, then runs it eagerly (first), captures (second) or replays."""

    def __init__(self, forward: ForwardFn, attention, inputs: StaticInputs, *, max_num_tokens: int,
                 max_num_seqs: int, max_seqlen: int, head_mode_of: Callable[[PackedBatch], int] | None = None,
                 num_head_modes: int = 1):
        """`head_mode_of(batch)`: which of the head's `num_head_modes` modes a batch runs in (each mode its
        own graphs: the head computes only what that batch's rows hold)."""
        self.forward, self.attention, self.inputs = forward, attention, inputs
        self.head_mode_of, self.num_head_modes = head_mode_of, num_head_modes
        self.buckets = token_buckets(max_num_tokens)
        self.max_num_seqs, self.max_seqlen = max_num_seqs, max_seqlen
        self.num_slots = getattr(attention, "num_graph_slots", 1)
        self.pool = None  # one memory pool for every graph, made at the first capture
        self.graphs: dict[GraphKey, _Captured] = {}
        self._warmed: set[GraphKey] = set()  # keys that had their eager warm-up run
        self.num_replays = 0  # graph launches, captures included (read by /metrics)
        self.num_eager_runs = 0  # warm-up runs of a key before its capture, and runs of keys that failed it
        self.num_capture_failures = 0  # keys whose capture failed and that now run eagerly
        self._eager_keys: set[GraphKey] = set()
        # A graph whose capture failed may still be referenced by the allocators' routing
        # filters (torch ends them only on a successful capture_end): kept alive, never freed.
        self._failed_graphs: list[torch.cuda.CUDAGraph] = []
        self._next_slot: dict[tuple[int, int, int, int], int] = {}
        # End of each key's last run, for backends that re-plan on the host (FlashInfer):
        # a wrapper's plan buffers must not be rewritten while its last run may read them.
        self._last_run: dict[GraphKey, torch.cuda.Event] = {}

    @staticmethod
    def max_num_segments(max_num_tokens: int, max_num_seqs: int) -> int:
        """The most segments any key can have (sizes the static buffer)."""
        return next_power_of_two(max_num_seqs + math.ceil(max_num_tokens / MIN_SEQLEN_BUCKET))

    def seqlen_buckets(self, bucket: int) -> list[int]:
        """The max_seqlen values a token bucket can be keyed with (each also caps dummy segments)."""
        values, size = [], MIN_SEQLEN_BUCKET
        while size < self.max_seqlen:
            values.append(min(size, bucket))
            size *= 2
        values.append(min(self.max_seqlen, bucket))
        return sorted(set(values))

    def layout(self, num_tokens: int, num_seqs: int, max_seqlen: int,
               num_outputs: int | None = None) -> tuple[int, int, int] | None:
        """(token bucket, segment count, max_seqlen) of a batch that pools `num_outputs` vectors
        (default: one per sequence), or None when it must run eagerly."""
        num_outputs = num_seqs if num_outputs is None else num_outputs
        if max(num_seqs, num_outputs) > self.max_num_seqs or num_tokens > self.buckets[-1] \
                or max_seqlen > self.max_seqlen:
            return None
        bucket = next(b for b in self.buckets if b >= num_tokens)
        chunk = min(max(MIN_SEQLEN_BUCKET, next_power_of_two(max_seqlen)), self.max_seqlen, bucket)
        num_pad_segments = math.ceil((bucket - num_tokens) / chunk)
        return bucket, next_power_of_two(max(num_seqs + num_pad_segments, num_outputs)), chunk

    def execute(self, batch: PackedBatch) -> tuple[torch.Tensor, int] | None:
        """Pooled vectors [>= num_outputs, dim] on the device, or None if the batch fits no bucket."""
        shape = self.layout(batch.num_tokens, batch.num_seqs, batch.max_seqlen, batch.num_outputs)
        if shape is None:
            return None
        bucket, num_segments, chunk = shape
        input_ids, positions, cu_seqlens, segment_ids = self.inputs.host_views(bucket, num_segments)
        _fill_padded(batch, chunk, input_ids, positions, cu_seqlens, segment_ids)
        mode = self.head_mode_of(batch) if self.head_mode_of is not None else 0
        return self._run(bucket, num_segments, chunk, cu_seqlens.tolist(), mode)

    def capture_all(self) -> int:
        """Capture every key a batch can reach (capture_at_start); return how many."""
        before = len(self.graphs)
        for bucket in self.buckets:
            for chunk in self.seqlen_buckets(bucket):
                fewest = next_power_of_two(math.ceil(bucket / chunk))
                most = next_power_of_two(min(bucket, self.max_num_seqs + math.ceil(bucket / chunk)))
                num_segments = fewest
                while num_segments <= most:
                    # Slots take turns, so 2 runs per slot make each run eagerly and then get
                    # captured; a key captured before (by warm-up) just replays.
                    for mode in range(self.num_head_modes):
                        for _ in range(2 * self.num_slots):
                            input_ids, positions, cu_seqlens, segment_ids = self.inputs.host_views(bucket,
                                                                                                  num_segments)
                            _fill_dummy(bucket, num_segments, chunk, input_ids, positions, cu_seqlens)
                            segment_ids[:] = -1
                            self._run(bucket, num_segments, chunk, cu_seqlens.tolist(), mode)
                    num_segments *= 2
        torch.cuda.synchronize()
        return len(self.graphs) - before

    def _run(self, bucket: int, num_segments: int, max_seqlen: int, cu_seqlens_host: list[int],
             mode: int = 0) -> tuple[torch.Tensor, int]:
        backend, num_slots = self._backend_for(bucket, max_seqlen)
        slot = self._next_slot.get((bucket, num_segments, max_seqlen, mode), 0)
        self._next_slot[(bucket, num_segments, max_seqlen, mode)] = (slot + 1) % num_slots
        key = GraphKey(bucket, num_segments, max_seqlen, slot, backend, mode)
        last_run = self._last_run.get(key)
        if last_run is not None and not last_run.query():
            last_run.synchronize()  # flow control: its wrapper is about to be re-planned
        inputs = self.inputs.upload(bucket, num_segments)  # input_ids, positions, cu_seqlens, segment_ids
        meta = self.attention.prepare_graph(key, inputs[2], cu_seqlens_host, max_seqlen)
        captured = self.graphs.get(key)
        if captured is None and key in self._warmed and key not in self._eager_keys:
            captured = self._capture(key, inputs, meta)
        if captured is None:  # the key's warm-up run, or a key whose capture failed
            self._warmed.add(key)
            self.num_eager_runs += 1
            output = self.forward(*inputs, num_segments, meta, mode)
        else:
            captured.graph.replay()
            self.num_replays += 1
            output = captured.output
        if num_slots > 1:
            self._last_run.setdefault(key, torch.cuda.Event()).record()
        return output, num_segments

    def _backend_for(self, bucket: int, max_seqlen: int) -> tuple[str, int]:
        """(name, graph slots) of the attention backend that runs this class of batch: the
        one backend, or the one `auto` chose for it (engine/rose/attention/choice.py)."""
        backend_for = getattr(self.attention, "backend_for", None)
        backend = backend_for(bucket, max_seqlen) if backend_for is not None else self.attention
        return getattr(backend, "name", ""), getattr(backend, "num_graph_slots", 1)

    def graph_classes(self) -> list[tuple[int, int]]:
        """Every (token bucket, max_seqlen bucket) a batch can be keyed with."""
        return [(bucket, chunk) for bucket in self.buckets for chunk in self.seqlen_buckets(bucket)]

    def _capture(self, key: GraphKey, inputs: tuple, meta) -> _Captured | None:
        """Capture the key's graph; None if the capture failed (the key runs eagerly from now on)."""
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
            self._capture_stream = torch.cuda.Stream()
        # capture_begin/end rather than torch.cuda.graph(): that context manager empties the
        # device and pinned-host caches before every capture, a cost paid hundreds of times
        # by capture_at_start, and it would release cached pinned readback buffers.
        graph = torch.cuda.CUDAGraph()
        try:
            output = capture_graph(graph, self._capture_stream, self.pool,
                                   lambda: self.forward(*inputs, key.num_segments, meta, key.mode))
        except Exception as exc:
            self._abandon_capture(key, graph, exc)
            return None
        captured = self.graphs[key] = _Captured(graph, output)
        return captured

    def _abandon_capture(self, key: GraphKey, graph: torch.cuda.CUDAGraph, exc: Exception) -> None:
        """What a failed capture leaves: its graph kept alive, a new pool, its shape eager from now on."""
        self._failed_graphs.append(graph)
        self.pool = torch.cuda.graph_pool_handle()  # the old one may still count as recording
        self._eager_keys.add(key)
        self.num_capture_failures += 1
        torch.cuda.synchronize()
        logger.warning("CUDA graph capture failed for %s (%s: %s); this shape runs eagerly from now on",
                       key, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")


def capture_graph(graph: torch.cuda.CUDAGraph, stream: torch.cuda.Stream, pool, fn: Callable[[], torch.Tensor]):
    """fn() captured into `graph` on `stream` with memory from `pool` (thread-local capture, the garbage
    collector paused); returns its output. A capture that fails is undone before its error is raised
    again, so that later captures and eager runs work."""
    torch.cuda.synchronize()
    try:
        with torch.cuda.stream(stream), gc_paused():
            graph.capture_begin(pool=pool, capture_error_mode="thread_local")
            try:
                return fn()
            finally:
                graph.capture_end()
    except Exception:
        with torch.cuda.stream(stream):
            if torch.cuda.is_current_stream_capturing():  # capture_end did not get as far as ending it
                try:
                    graph.capture_end()
                except Exception:
                    pass  # an invalidated capture ends with an error; ended is all that matters
        try:
            # capture_end stops routing allocations to the pool only when it succeeds.
            torch._C._cuda_endAllocateToPool(stream.device.index, pool)
        except Exception:
            pass  # it had ended (the capture failed after capture_end's own cleanup)
        raise
    finally:
        torch.cuda.current_stream().wait_stream(stream)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No garbage collection during a capture: a collection that frees another graph (of an
    engine dropped earlier, say) destroys it mid-capture, which CUDA forbids, and the capture
    fails."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _fill_padded(batch: PackedBatch, chunk: int, input_ids: np.ndarray, positions: np.ndarray,
                 cu_seqlens: np.ndarray, segment_ids: np.ndarray) -> None:
    """Write a batch and its padding: dummy segments of <= chunk tokens, then empty ones; the
    padding tokens are pooled into no segment."""
    num_tokens, num_seqs, bucket = batch.num_tokens, batch.num_seqs, len(input_ids)
    input_ids[:num_tokens] = batch.input_ids
    positions[:num_tokens] = batch.positions
    segment_ids[:num_tokens] = batch.pooling_ids()
    segment_ids[num_tokens:] = -1
    cu_seqlens[: num_seqs + 1] = batch.cu_seqlens
    pad = bucket - num_tokens
    input_ids[num_tokens:] = 0
    positions[num_tokens:] = np.arange(pad, dtype=np.int32) % chunk
    ends = np.arange(num_tokens + chunk, bucket + chunk, chunk, dtype=np.int32)[: math.ceil(pad / chunk)]
    cu_seqlens[num_seqs + 1 : num_seqs + 1 + len(ends)] = np.minimum(ends, bucket)
    cu_seqlens[num_seqs + 1 + len(ends) :] = bucket


def _fill_dummy(bucket: int, num_segments: int, chunk: int, input_ids: np.ndarray, positions: np.ndarray,
                cu_seqlens: np.ndarray) -> None:
    """A batch made only of padding, for capturing ahead of traffic."""
    input_ids[:] = 0
    positions[:] = np.arange(bucket, dtype=np.int32) % chunk
    ends = np.minimum(np.arange(chunk, bucket + chunk, chunk, dtype=np.int32), bucket)
    cu_seqlens[0] = 0
    cu_seqlens[1 : 1 + len(ends)] = ends
    cu_seqlens[1 + len(ends) :] = bucket
