"""ModelRunner: a packed batch -> device -> model -> sentence head (pooling, Dense, normalisation) -> vectors,
eager or graph."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from rose_embed.engine.contract.batch import PackedBatch, split_packed
from rose_embed.engine.contract.hidden_keys import reveal_hidden_keys
from rose_embed.engine.rose.quantization.fp8_plan import pooled_tokens_of
from rose_embed.engine.rose.graphs import CUDAGraphRunner, StaticInputs
from rose_embed.engine.rose.image_graphs import ImageGraphs
from rose_embed.engine.rose.attention.ragged import AttentionBackend
from rose_embed.engine.rose.layers.head import SentenceHead
from rose_embed.engine.rose.layers.pooling import normalize, pooled_token_rows
from rose_embed.engine.rose.lazy import LazyResult


# The CPU runs a batch in pieces of at most this many tokens: matmuls are as fast on 2,048
# rows as on 16,384, while activations 8x smaller keep the heap small and reusable (see
# engine/contract/memory.py); measured at 2,048 and 4,096 within noise of each other and of 16,384.
CPU_CHUNK_TOKENS = 2048


class ModelRunner:
    """Runs one batch at a time; call it from one thread only (the engine thread).

    On CUDA, inputs go through one static device buffer (pinned staging, one async copy),
    and batches run as whole-model CUDA graphs per token bucket unless `enforce_eager`;
    the eager path is the one `if` below. Results come back as LazyResults, so launching a
    batch never waits for the device.
    """

    def __init__(self, model: torch.nn.Module, head: SentenceHead, attention: AttentionBackend, device: torch.device,
                 *, max_num_tokens: int, max_num_seqs: int, max_seqlen: int, enforce_eager: bool = False,
                 hidden_keys_attention: AttentionBackend | None = None, image_shape: tuple[int, int] | None = None):
        """`image_shape`: (image_size, tokens per image) of a model with a vision tower (CLIP)."""
        self.model, self.head, self.attention, self.device = model, head, attention, device
        # Where `attention` cannot hide keys: what a batch that hides some runs on, eagerly (engine.py's
        # hidden_keys_backend); None where `attention` can, or no batch hides any.
        self.hidden_keys_attention = hidden_keys_attention
        self.inputs: StaticInputs | None = None
        self._num_eager_runs = 0  # batches run outside any graph (CPU, enforce_eager, no bucket)
        self.graphs: CUDAGraphRunner | None = None
        if device.type == "cuda":
            max_num_segments = CUDAGraphRunner.max_num_segments(max_num_tokens, max_num_seqs)
            self.inputs = StaticInputs(max_num_tokens, max_num_segments, device)
            if not enforce_eager and hasattr(attention, "prepare_graph"):
                self.graphs = CUDAGraphRunner(self._forward, attention, self.inputs, max_num_tokens=max_num_tokens,
                                              max_num_seqs=max_num_seqs, max_seqlen=max_seqlen,
                                              head_mode_of=self._head_mode_of, num_head_modes=self._num_head_modes)
        self.image_graphs: ImageGraphs | None = None
        if device.type == "cuda" and not enforce_eager and image_shape is not None:
            image_size, image_tokens = image_shape  # the queue cuts batches of images by their tokens
            max_images = min(max_num_seqs, max(1, max_num_tokens // image_tokens))
            self.image_graphs = ImageGraphs(self._image_vectors, image_size, max_images, device)

    @property
    def _num_head_modes(self) -> int:
        """A head that computes different rows for different batches (MaxSimHead: token vectors or scores)
        says how many kinds it tells apart and which a batch is (`mode_of`); the rest have one."""
        return getattr(self.head, "num_modes", 1)

    def _head_mode_of(self, batch: PackedBatch) -> int:
        return self.head.mode_of(batch) if self._num_head_modes > 1 else 0

    def _forward(self, input_ids: torch.Tensor, positions: torch.Tensor, cu_seqlens: torch.Tensor,
                 segment_ids: torch.Tensor, num_segments: int, meta: object, head_mode: int = 0,
                 attention: AttentionBackend | None = None) -> torch.Tensor:
        """Everything a graph holds: the model and the sentence head -> [num_segments, dim] float32.
        `attention`: the backend `meta` is for, if not the runner's own."""
        if (pooled := pooled_tokens_of(self.model)) is not None:  # FP8 linears that keep them bf16 read them
            pooled.index = pooled_token_rows(segment_ids, num_segments, self.head.pooling)
        hidden = self.model(input_ids, positions, attention or self.attention, meta)
        # A head whose rows differ at a text's first token (M3Head) reads the positions, on the device.
        extra = {"positions": positions} if getattr(self.head, "reads_positions", False) else {}
        if self._num_head_modes > 1:
            return self.head(hidden, segment_ids, num_segments, head_mode, **extra)
        return self.head(hidden, segment_ids, num_segments, **extra)

    @torch.inference_mode()
    def execute(self, batch: PackedBatch) -> LazyResult:
        """The batch's vectors, one per pooling segment (per sequence, but for late-chunked documents), or
        per image where the batch holds images (their pixels, through the vision tower)."""
        if batch.pixels is not None:
            return self.execute_images(batch.pixels, batch.max_seqlen)
        num_outputs = batch.num_outputs
        if self.graphs is not None and not self._hides_keys_elsewhere(batch):
            ran = self.graphs.execute(batch)
            if ran is not None:
                vectors, _ = ran
                return LazyResult(vectors[:num_outputs], num_outputs)
        self._num_eager_runs += 1
        if self.device.type == "cpu":
            parts = [self._run_eager(part) for part in split_packed(batch, CPU_CHUNK_TOKENS)]
            return LazyResult(parts[0] if len(parts) == 1 else torch.cat(parts), num_outputs)
        return LazyResult(self._run_eager(batch), num_outputs)

    @torch.inference_mode()
    def execute_images(self, pixel_values: np.ndarray, seq_len: int | None = None) -> LazyResult:
        """Images' vectors, for a model with a vision tower (CLIP): pixel_values [N, 3, S, S] float32, as
        engine/image/preprocess.py makes them -> [N, dim], normalised where the head normalises texts'.
        On CUDA in graphs per image count (engine/rose/image_graphs.py), in pieces of at most its largest
        bucket. `seq_len`: the tokens each image counts (its patches and class token); on the CPU the images
        run in pieces of about CPU_CHUNK_TOKENS tokens, as texts do."""
        if self.image_graphs is not None:
            size = self.image_graphs.max_images
            starts = range(0, len(pixel_values), size)
            if len(starts) == 1:
                return LazyResult(self.image_graphs.execute(pixel_values), len(pixel_values))
            # A part's vectors are its graph's output, which the next replay of that graph rewrites: copied first.
            parts = [self.image_graphs.execute(pixel_values[lo: lo + size]).clone() for lo in starts]
            return LazyResult(torch.cat(parts), len(pixel_values))
        self._num_eager_runs += 1
        size = len(pixel_values)
        if self.device.type == "cpu" and seq_len:
            size = max(1, CPU_CHUNK_TOKENS // seq_len)
        parts = [self._image_vectors(torch.from_numpy(pixel_values[lo: lo + size]).to(self.device))
                 for lo in range(0, len(pixel_values), size)]
        return LazyResult(parts[0] if len(parts) == 1 else torch.cat(parts), len(pixel_values))

    def _image_vectors(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """What an image graph holds: pixels on the device -> vectors [N, dim] float32."""
        vectors = self.model.embed_images(pixel_values).float()
        return normalize(vectors) if self.head.normalize else vectors

    @torch.inference_mode()
    def warm_up_images(self) -> int:
        """Capture the vision tower's graph of every image-count bucket (CUDA); return how many there are."""
        return self.image_graphs.warm_up() if self.image_graphs is not None else 0

    def _hides_keys_elsewhere(self, batch: PackedBatch) -> bool:
        """Whether the batch hides keys, which the runner's own backend (and its graphs) cannot."""
        return self.hidden_keys_attention is not None and bool((batch.input_ids < 0).any())

    def _run_eager(self, batch: PackedBatch) -> torch.Tensor:
        batch, num_keys = reveal_hidden_keys(batch)
        input_ids, positions, cu_seqlens, segment_ids = self._load(batch)
        attention = self.attention
        if num_keys is None:
            meta = attention.prepare(cu_seqlens, batch.cu_seqlens.tolist(), batch.max_seqlen)
        else:
            if not getattr(attention, "takes_num_keys", False):
                if self.hidden_keys_attention is None:  # engine.py builds one for every model that hides keys
                    raise ValueError(f"the {attention.name} attention backend cannot hide tokens as keys")
                attention = self.hidden_keys_attention
            meta = attention.prepare(cu_seqlens, batch.cu_seqlens.tolist(), batch.max_seqlen, num_keys=num_keys)
        return self._forward(input_ids, positions, cu_seqlens, segment_ids, batch.num_outputs, meta,
                             self._head_mode_of(batch), attention)

    def interleave(self, between_layers: Callable[[], None]) -> bool:
        """On the CPU, call `between_layers` after each of the model's layers (engine/queue/express_lane.py:
        it may run a small batch there, through this runner again). False where the layers cannot be
        reached: on a GPU, whose batches run as whole graphs, or a model without a `layers` list."""
        layers = getattr(self.model, "layers", None)
        if self.device.type != "cpu" or not isinstance(layers, torch.nn.ModuleList):
            return False
        for layer in layers:
            layer.register_forward_hook(lambda *_: between_layers())
        return True

    def _graph_count(self, name: str) -> int:
        """A counter summed over the text graphs and the image graphs."""
        return sum(getattr(graphs, name) for graphs in (self.graphs, self.image_graphs) if graphs is not None)

    @property
    def num_graph_replays(self) -> int:
        return self._graph_count("num_replays")

    @property
    def num_eager_runs(self) -> int:
        return self._num_eager_runs + self._graph_count("num_eager_runs")

    @property
    def num_capture_failures(self) -> int:
        return self._graph_count("num_capture_failures")

    def choose_attention(self) -> str | None:
        """attention_backend "auto" with graphs: time the candidates on every graph class and
        keep the fastest per class (engine/rose/attention/choice.py); the choice table for
        the log, or None where there is nothing to choose."""
        if self.graphs is None or not hasattr(self.attention, "choose"):
            return None
        from rose_embed.engine.rose.attention.timing import AttentionTimer

        started = time.perf_counter()
        timer = AttentionTimer(self.attention.shape, next(self.model.parameters()).dtype, self.device,
                               self.graphs.buckets[-1], self.graphs.max_num_seqs)
        self.attention.choose(self.graphs.graph_classes(), timer)
        del timer
        torch.cuda.empty_cache()  # the timing graphs' pool and q, k, v
        return (f"attention backend per batch class, chosen in {time.perf_counter() - started:.1f} s "
                f"(token bucket; longest sequence: chosen (time per layer of each)):\n{self.attention.describe()}")

    def attention_table(self) -> list[tuple[str, str, str]]:
        """(token bucket, max_seqlen bucket, backend) rows, as /metrics shows them: the choice of
        auto per class, or one row for a single backend."""
        rows = getattr(self.attention, "table_rows", None)
        return rows() if rows is not None else [("any", "any", self.attention.name)]

    @torch.inference_mode()
    def capture_all(self) -> int:
        """Capture every graph ahead of traffic (capture_at_start); return how many."""
        return self.graphs.capture_all() if self.graphs is not None else 0

    def _load(self, batch: PackedBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(input_ids, positions, cu_seqlens, segment_ids) on the device."""
        if self.inputs is None or 3 * batch.num_tokens + batch.num_seqs + 1 > self.inputs.capacity:
            # CPU (the numpy arrays are the tensors), or a batch past the budget (never from the batcher).
            return tuple(torch.from_numpy(a).to(self.device) for a in (batch.input_ids, batch.positions,
                                                                       batch.cu_seqlens, batch.pooling_ids()))
        input_ids, positions, cu_seqlens, segment_ids = self.inputs.host_views(batch.num_tokens, batch.num_seqs)
        input_ids[:], positions[:], cu_seqlens[:] = batch.input_ids, batch.positions, batch.cu_seqlens
        segment_ids[:] = batch.pooling_ids()
        return self.inputs.upload(batch.num_tokens, batch.num_seqs)
