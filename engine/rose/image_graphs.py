"""CUDA graphs of a vision tower, one per image-count bucket.

Every image of a model is one sequence of the same length (its patches and the class token), so a batch
of images has one shape per image count: counts are padded up to a bucket (powers of two, then the most
images a batch can hold), and one static pixel buffer feeds every graph. As the text graphs
(engine/rose/graphs.py): the first batch of a bucket runs eagerly on the padded shape (library set-up,
cuBLAS heuristics), the second is captured, later ones replay; a capture runs in thread-local mode and
with the garbage collector paused, and one that fails is cleaned up and leaves its bucket eager. The
engine's warm-up captures every bucket, so that no request waits for a capture.

The padding images are whatever the buffer held before: an image attends to its own patches only, so they
change no real image's vector, and their rows are never read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from rose_embed.engine.rose.graphs import capture_graph

logger = logging.getLogger("rose_embed.engine")


def image_buckets(max_images: int) -> list[int]:
    """1, 2, 4, ... below max_images, then max_images."""
    buckets, size = [], 1
    while size < max_images:
        buckets.append(size)
        size *= 2
    return [*buckets, max_images]


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    output: torch.Tensor  # [bucket, dim] float32, rewritten by each replay


class ImageGraphs:
    """Pads a batch of images to its bucket, then runs it eagerly (first), captures (second) or replays."""

    def __init__(self, vectors_of: Callable[[torch.Tensor], torch.Tensor], image_size: int, max_images: int,
                 device: torch.device):
        """`vectors_of(pixels [N, 3, S, S] float32 on the device)` -> [N, dim] float32: what a graph holds."""
        self.vectors_of = vectors_of
        self.buckets = image_buckets(max_images)
        self.max_images = max_images
        self.pixels = torch.zeros(max_images, 3, image_size, image_size, dtype=torch.float32, device=device)
        self.graphs: dict[int, _Captured] = {}
        self._warmed: set[int] = set()  # buckets that had their eager run
        self._eager: set[int] = set()  # buckets whose capture failed
        self._failed_graphs: list[torch.cuda.CUDAGraph] = []  # kept alive, as graphs.py says why
        self.pool = None  # made at the first capture, shared by every bucket's graph
        self.num_replays = self.num_eager_runs = self.num_capture_failures = 0

    def execute(self, pixel_values: np.ndarray) -> torch.Tensor:
        """Vectors [N, dim] float32 on the device of N <= max_images images [N, 3, S, S] float32."""
        num = len(pixel_values)
        # Staged through pinned memory, so that the copy is asynchronous and the caller's array (a view of
        # shared memory) is read before this returns; the host allocator reuses the block after the copy.
        staged = torch.from_numpy(pixel_values).pin_memory()
        self.pixels[:num].copy_(staged, non_blocking=True)
        return self._run(next(b for b in self.buckets if b >= num))[:num]

    def warm_up(self) -> int:
        """Run and capture every bucket ahead of traffic; return how many graphs there are."""
        for bucket in self.buckets:
            for _ in range(2):  # eager, then captured (a bucket captured before just replays)
                self._run(bucket)
        torch.cuda.synchronize()
        return len(self.graphs)

    def _run(self, bucket: int) -> torch.Tensor:
        captured = self.graphs.get(bucket)
        if captured is None and bucket in self._warmed and bucket not in self._eager:
            captured = self._capture(bucket)
        if captured is None:
            self._warmed.add(bucket)
            self.num_eager_runs += 1
            return self.vectors_of(self.pixels[:bucket])
        captured.graph.replay()
        self.num_replays += 1
        return captured.output

    def _capture(self, bucket: int) -> _Captured | None:
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
            self._stream = torch.cuda.Stream()
        graph = torch.cuda.CUDAGraph()
        try:
            output = capture_graph(graph, self._stream, self.pool, lambda: self.vectors_of(self.pixels[:bucket]))
        except Exception as exc:
            self._abandon(bucket, graph, exc)
            return None
        captured = self.graphs[bucket] = _Captured(graph, output)
        return captured

    def _abandon(self, bucket: int, graph: torch.cuda.CUDAGraph, exc: Exception) -> None:
        """What a failed capture leaves (as CUDAGraphRunner._abandon_capture): its graph kept alive, a new
        pool, its bucket eager from now on."""
        self._failed_graphs.append(graph)
        self.pool = torch.cuda.graph_pool_handle()
        self._eager.add(bucket)
        self.num_capture_failures += 1
        torch.cuda.synchronize()
        logger.warning("CUDA graph capture failed for %d images (%s: %s); that many run eagerly from now on",
                       bucket, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
