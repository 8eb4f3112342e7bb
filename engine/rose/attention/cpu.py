"""CPU attention: sequences grouped by length, one padded SDPA call per group.

One SDPA call per sequence is exact but pays a parallel-region start per call and per
layer (thousands per batch of short texts, and far worse on a busy machine). Sorting by
length and grouping sequences whose padded size stays within PAD_SLACK of their real size
keeps the padding waste small and the call count at a few dozen per layer. Padded keys are
masked out and padded query rows dropped, so results equal the per-sequence path; so are the
keys a sequence hides (engine/contract/hidden_keys.py), its rows staying queries.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from rose_embed.engine.rose.attention.ragged import AttentionShape, allowed_keys, relative_bias_rows

PAD_SLACK = 1.25  # a group's padded tokens may exceed its real tokens by this factor
MAX_GROUP_SEQS = 256


@dataclass(frozen=True)
class _Group:
    gather: torch.Tensor  # [G * L] int64: row of the packed stream for each padded slot
    valid: torch.Tensor  # [G * L] bool: slot holds a real token
    dest: torch.Tensor  # [n_real] int64: gather[valid], where outputs go back
    mask: torch.Tensor | None  # [G, 1, 1 or L, L] bool attention mask; None: one sequence
    local_mask: torch.Tensor | None  # [G, 1, L, L] bool, for the shape's sliding-window layers
    num_seqs: int
    max_len: int
    # Float masks with the position bias folded in, built by the first layer of the batch
    # and reused by the others (MPNet shares one bias table across its layers).
    biased: dict = field(default_factory=dict)


def _group_ranges(sorted_lengths: np.ndarray) -> list[tuple[int, int]]:
    """Split ascending lengths into [lo, hi) groups within the padding slack."""
    ranges, lo, real = [], 0, 0
    for i, n in enumerate(sorted_lengths):
        n = int(n)
        if i > lo and ((i - lo + 1) * n > PAD_SLACK * (real + n) or i - lo >= MAX_GROUP_SEQS):
            ranges.append((lo, i))
            lo, real = i, 0
        real += n
    if lo < len(sorted_lengths):
        ranges.append((lo, len(sorted_lengths)))
    return ranges


class GroupedSDPABackend:
    name = "sdpa"
    takes_num_keys = True

    def __init__(self, shape: AttentionShape):
        self.shape = shape

    def prepare(self, cu_seqlens: torch.Tensor, cu_seqlens_host: list[int], max_seqlen: int,
                num_keys: np.ndarray | None = None) -> list[_Group]:
        """`num_keys` [B]: each sequence's keys, its first tokens (None: all of them)."""
        cu = np.asarray(cu_seqlens_host, dtype=np.int64)
        lengths = np.diff(cu)
        order = np.argsort(lengths, kind="stable")
        groups = []
        for lo, hi in _group_ranges(lengths[order]):
            seqs = order[lo:hi]
            seqs = seqs[lengths[seqs] > 0]
            if len(seqs) == 0:
                continue
            max_len = int(lengths[seqs].max())
            offsets = np.arange(max_len)
            valid = offsets[None, :] < lengths[seqs][:, None]  # [G, L]
            gather = np.where(valid, cu[seqs][:, None] + offsets[None, :], cu[seqs][:, None])
            keys = valid if num_keys is None else offsets[None, :] < num_keys[seqs][:, None]  # [G, L]
            mask = None
            if len(seqs) > 1 or num_keys is not None and not keys.all():
                mask_np = keys[:, None, None, :]
                if self.shape.is_causal:
                    mask_np = mask_np & np.tril(np.ones((max_len, max_len), dtype=bool))[None, None]
                mask = torch.from_numpy(np.ascontiguousarray(mask_np))
            local_mask = None
            if self.shape.window is not None:
                local_mask = torch.from_numpy(keys[:, None, None, :]) & allowed_keys(self.shape, max_len, True)
            gather_t = torch.from_numpy(gather.reshape(-1))
            valid_t = torch.from_numpy(valid.reshape(-1))
            groups.append(_Group(gather_t, valid_t, gather_t[valid_t], mask, local_mask, len(seqs), max_len))
        return groups

    def _mask(self, g: _Group, local: bool, position_bias: torch.Tensor | None, dtype: torch.dtype):
        mask = g.local_mask if local else g.mask
        if position_bias is None:
            return mask
        key = (local, position_bias.data_ptr(), dtype)
        if key not in g.biased:
            if mask is None and self.shape.is_causal:
                mask = allowed_keys(self.shape, g.max_len, False)[None, None]
            bias = relative_bias_rows(position_bias, g.max_len).to(dtype)[None]  # [1, H, L, L]
            g.biased[key] = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
        return g.biased[key]

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: list[_Group], local: bool = False,
                position_bias: torch.Tensor | None = None) -> torch.Tensor:
        out = torch.empty_like(q)
        grouped_heads = self.shape.num_kv_heads != self.shape.num_heads
        for g in meta:
            mask = self._mask(g, local, position_bias, q.dtype)
            # [G*L, H, D] -> [G, H, L, D], the layout SDPA expects.
            def padded(x: torch.Tensor) -> torch.Tensor:
                return x.index_select(0, g.gather).view(g.num_seqs, g.max_len, x.shape[1], x.shape[2]).transpose(1, 2)

            result = F.scaled_dot_product_attention(
                padded(q), padded(k), padded(v),
                attn_mask=mask,
                is_causal=self.shape.is_causal and mask is None,
                scale=self.shape.scale,
                enable_gqa=grouped_heads,
            )
            rows = result.transpose(1, 2).reshape(-1, q.shape[1], q.shape[2])
            out.index_copy_(0, g.dest, rows[g.valid] if g.mask is not None else rows)
        return out
