"""CUDA attention backends over a packed stream: torch's varlen_attn, FlashInfer's ragged prefill
and our packed-tile Triton kernel.

Both take the interface of `engine.rose.attention.ragged`: `prepare` once per batch (outside any
CUDA graph), `forward` once per layer (inside it). For graphs, `prepare_graph(key, ...)`
returns metadata that stays valid across replays of the graph named `key`: tensors whose
addresses never change, refilled before each replay.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from rose_embed.engine.rose.attention.ragged import AttentionShape

if TYPE_CHECKING:  # the kernel's module imports Triton, which a machine without CUDA may lack
    from rose_embed.engine.rose.attention.packed import Tiles

FLASHINFER_HEAD_DIMS = (64, 128, 256)
# FlashAttention's kernels (behind varlen_attn) and FlashInfer's take these alone; a float32
# engine's attention runs in the packed kernel (IEEE float32 dots) or the biased Triton kernel.
HALF_DTYPES = (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class VarlenMeta:
    cu_seqlens: torch.Tensor  # [B+1] int32 on the device
    max_seqlen: int


class VarlenAttentionBackend:
    """`torch.nn.attention.varlen.varlen_attn` (FlashAttention-2 kernels): any head_dim.

    Graph-safe as is: cu_seqlens is a static buffer and max_seqlen a Python int baked into
    the graph, so the graph runner passes the longest sequence it allows, not the real one.
    """

    name = "varlen"
    num_graph_slots = 1  # nothing is planned on the host, one graph per bucket is enough

    def __init__(self, shape: AttentionShape):
        from torch.nn.attention.varlen import varlen_attn

        self.shape = shape
        self._varlen_attn = varlen_attn
        # (-1, 0) is causal, (-1, -1) full; GQA needs an explicit flag on newer torch.
        self._kwargs: dict = {"scale": shape.scale, "window_size": (-1, 0) if shape.is_causal else (-1, -1)}
        if shape.num_kv_heads != shape.num_heads and "enable_gqa" in inspect.signature(varlen_attn).parameters:
            self._kwargs["enable_gqa"] = True
        # A local layer's (left, right) keys; FlashAttention's window bounds are inclusive, as ours are.
        self._local_kwargs = dict(self._kwargs)
        if shape.window is not None:
            left, right = shape.window
            self._local_kwargs["window_size"] = (left, 0 if shape.is_causal else right)
        self._biased_attention = None
        if shape.has_position_bias:  # varlen_attn takes no bias: our Triton kernel adds it
            from rose_embed.engine.rose.attention.triton_biased import varlen_attention_with_bias

            self._biased_attention = varlen_attention_with_bias

    def prepare(self, cu_seqlens: torch.Tensor, cu_seqlens_host: list[int], max_seqlen: int) -> VarlenMeta:
        return VarlenMeta(cu_seqlens, max_seqlen)

    def prepare_graph(self, key: object, cu_seqlens: torch.Tensor, cu_seqlens_host: list[int], max_seqlen: int) -> VarlenMeta:
        return VarlenMeta(cu_seqlens, max_seqlen)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: VarlenMeta, local: bool = False,
                position_bias: torch.Tensor | None = None) -> torch.Tensor:
        cu = meta.cu_seqlens
        if position_bias is not None:
            window = self.shape.window if local else None
            return self._biased_attention(q, k, v, cu, meta.max_seqlen, position_bias, self.shape.scale,
                                          self.shape.is_causal, window)
        kwargs = self._local_kwargs if local else self._kwargs
        return self._varlen_attn(q, k, v, cu, cu, meta.max_seqlen, meta.max_seqlen, **kwargs)


def flashinfer_available() -> bool:
    try:
        import flashinfer  # noqa: F401
    except Exception:  # ImportError, or a broken CUDA toolchain behind it
        return False
    return True


class FlashInferAttentionBackend:
    """FlashInfer's BatchPrefillWithRaggedKVCacheWrapper: head_dim 64, 128 or 256.

    `plan()` costs host time (0.4-0.8 ms) and writes the wrapper's buffers, so it runs
    outside the graph; `run()` is what a graph captures. A wrapper whose graph may still be
    running must not be re-planned: graphs come in two slots per bucket, used in turn, and
    the graph runner waits for a slot's previous replay before planning it again.
    """

    name = "flashinfer"
    num_graph_slots = 2

    def __init__(self, shape: AttentionShape, device: torch.device, dtype: torch.dtype, workspace_bytes: int = 128 << 20):
        import flashinfer

        if shape.head_dim not in FLASHINFER_HEAD_DIMS:
            raise ValueError(f"flashinfer needs head_dim in {FLASHINFER_HEAD_DIMS}; this model has {shape.head_dim}")
        refuse_for_flashinfer(shape)
        self.shape, self.device, self.dtype = shape, device, dtype
        self._flashinfer = flashinfer
        # One float workspace for every wrapper: runs are serialised on one stream.
        self._workspace = torch.empty(workspace_bytes, dtype=torch.uint8, device=device)
        self._eager = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(self._workspace, "NHD")
        self._graph_wrappers: dict[object, object] = {}

    def _plan(self, wrapper, cu_seqlens_host: list[int]) -> None:
        indptr = torch.tensor(cu_seqlens_host, dtype=torch.int32)
        wrapper.plan(
            indptr, indptr, self.shape.num_heads, self.shape.num_kv_heads, self.shape.head_dim,
            causal=self.shape.is_causal, sm_scale=self.shape.scale, q_data_type=self.dtype, kv_data_type=self.dtype,
        )

    def prepare(self, cu_seqlens: torch.Tensor, cu_seqlens_host: list[int], max_seqlen: int):
        # The eager wrapper is re-planned for every batch: wait until the batches queued so
        # far have run, so that its plan buffers are not rewritten under them. This gives up
        # host/device overlap, which only an eager engine (a debugging mode) uses.
        queued = torch.cuda.Event()
        queued.record()
        queued.synchronize()
        self._plan(self._eager, cu_seqlens_host)
        return self._eager

    def prepare_graph(self, key: object, cu_seqlens: torch.Tensor, cu_seqlens_host: list[int], max_seqlen: int):
        wrapper = self._graph_wrappers.get(key)
        if wrapper is None:
            num_segments = len(cu_seqlens_host)
            wrapper = self._flashinfer.BatchPrefillWithRaggedKVCacheWrapper(
                self._workspace, "NHD", use_cuda_graph=True,
                qo_indptr_buf=torch.empty(num_segments, dtype=torch.int32, device=self.device),
                kv_indptr_buf=torch.empty(num_segments, dtype=torch.int32, device=self.device),
            )
            self._graph_wrappers[key] = wrapper
        self._plan(wrapper, cu_seqlens_host)
        return wrapper

    def release_graph(self, key: object) -> None:
        """Forget the wrapper of a graph that is gone (the warm-up's timing graphs)."""
        self._graph_wrappers.pop(key, None)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta, local: bool = False,
                position_bias: torch.Tensor | None = None) -> torch.Tensor:
        return meta.run(q, k, v)  # the constructor refused any shape that would pass local or a bias


def refuse_for_flashinfer(shape: AttentionShape) -> None:
    """FlashInfer's ragged wrapper has one window per plan, to the left only, and no additive
    bias: a model that needs either is refused rather than run approximately."""
    if shape.window is not None:
        raise ValueError("flashinfer cannot run this model's sliding-window layers exactly; "
                         "use the varlen attention backend (the default)")
    if shape.has_position_bias:
        raise ValueError("flashinfer cannot add this model's relative position bias (MPNet); "
                         "use the varlen attention backend (the default)")


class PackedMeta:
    """cu_seqlens, and the per-token sequence bounds the kernel reads, made by the first layer
    that asks: inside the graph when one is captured (so every replay remakes them from the
    batch's cu_seqlens), once per batch either way."""

    def __init__(self, cu_seqlens: torch.Tensor):
        self.cu_seqlens = cu_seqlens
        self._bounds: tuple[torch.Tensor, torch.Tensor] | None = None

    def bounds(self, num_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._bounds is None:
            from rose_embed.engine.rose.attention.packed import sequence_bounds

            self._bounds = sequence_bounds(self.cu_seqlens, num_tokens)
        return self._bounds


class PackedAttentionBackend:
    """Query tiles cut over the packed stream, several short sequences to a tile
    (engine/rose/attention/packed.py): any head_dim, causal or not, GQA; no windows or bias."""

    name = "packed"
    num_graph_slots = 1  # nothing is planned on the host

    def __init__(self, shape: AttentionShape, tiles: Tiles | None = None):
        if shape.window is not None or shape.has_position_bias:
            raise ValueError("the packed attention kernel has no sliding windows or position bias; "
                             "use the varlen attention backend")
        if shape.head_dim > 256:  # its query tile and accumulator would not fit in registers
            raise ValueError(f"the packed attention kernel takes head_dim up to 256; this model has {shape.head_dim}")
        from rose_embed.engine.rose.attention.packed import packed_attention

        self.shape, self.tiles = shape, tiles
        self._attention = packed_attention

    def prepare(self, cu_seqlens: torch.Tensor, cu_seqlens_host: list[int], max_seqlen: int) -> PackedMeta:
        return PackedMeta(cu_seqlens)

    def prepare_graph(self, key: object, cu_seqlens: torch.Tensor, cu_seqlens_host: list[int],
                      max_seqlen: int) -> PackedMeta:
        return PackedMeta(cu_seqlens)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: PackedMeta, local: bool = False,
                position_bias: torch.Tensor | None = None) -> torch.Tensor:
        seq_start, seq_end = meta.bounds(q.shape[0])
        return self._attention(q, k, v, seq_start, seq_end, self.shape.scale, self.shape.is_causal, self.tiles)


def make_cuda_attention_backend(name: str, shape: AttentionShape, device: torch.device, dtype: torch.dtype):
    """"auto": every backend that runs here and can run the shape exactly, the fastest chosen
    per class of batch at warm-up (engine/rose/attention/choice.py), varlen where none was
    timed; any other name forces that backend."""
    if name == "auto":
        candidates = auto_candidates(shape, device, dtype)
        if len(candidates) == 1:
            return candidates[0]
        from rose_embed.engine.rose.attention.choice import AutoAttentionBackend

        return AutoAttentionBackend(candidates)
    if name == "varlen":
        if (refusal := varlen_refusal(shape, dtype)) is not None:
            raise ValueError(refusal)
        return VarlenAttentionBackend(shape)
    if name == "packed":
        return PackedAttentionBackend(shape)
    if name == "flashinfer":  # what the model needs first: installing FlashInfer would not change it
        refuse_for_flashinfer(shape)
    if (refusal := cuda_refusal(name, dtype)) is not None:
        raise ValueError(refusal)
    if name == "flashinfer":
        return FlashInferAttentionBackend(shape, device, dtype)
    raise ValueError(f"unknown attention backend {name!r}; choose auto, varlen, packed, flashinfer (or native, sdpa on CPU)")


def cuda_refusal(name: str, dtype: torch.dtype) -> str | None:
    """Why the backend called `name` cannot run on a GPU here at `dtype`, whatever the model, or None where it may."""
    if name == "native":
        return "attention backend native is the CPU's; on CUDA choose auto, varlen, packed or flashinfer"
    if name == "flashinfer" and dtype not in HALF_DTYPES:
        return (f"attention backend flashinfer takes float16 and bfloat16 only, not "
                f"{str(dtype).removeprefix('torch.')}; with --dtype float32 choose auto or packed")
    if name == "flashinfer" and not flashinfer_available():
        return "attention backend flashinfer: the flashinfer package is not installed (pip install 'rose-embed[gpu]')"
    return None


def auto_candidates(shape: AttentionShape, device: torch.device, dtype: torch.dtype) -> list:
    """varlen first (the default; packed at float32), then packed and FlashInfer where they run the shape exactly.
    FlashInfer only where installed: it compiles its kernels at first use (a minute or more
    per head_dim, cached under ~/.cache/flashinfer), which the first start then pays."""
    candidates = [] if varlen_refusal(shape, dtype) else [VarlenAttentionBackend(shape)]
    try:
        candidates.append(PackedAttentionBackend(shape))
    except Exception as exc:  # a window or a bias, or no working Triton
        if not candidates:
            raise ValueError(f"{varlen_refusal(shape, dtype)}, and {exc}") from exc
    if dtype in HALF_DTYPES and shape.head_dim in FLASHINFER_HEAD_DIMS and shape.window is None \
            and not shape.has_position_bias and flashinfer_available():
        candidates.append(FlashInferAttentionBackend(shape, device, dtype))
    return candidates


def varlen_refusal(shape: AttentionShape, dtype: torch.dtype) -> str | None:
    """Why varlen cannot run the shape at `dtype`: FlashAttention, which it calls for every shape
    without a position bias, has no float32 kernels."""
    if dtype in HALF_DTYPES or shape.has_position_bias:
        return None
    return (f"attention backend varlen runs FlashAttention, which takes float16 and bfloat16 only, not "
            f"{str(dtype).removeprefix('torch.')}; with --dtype float32 the packed backend runs")
