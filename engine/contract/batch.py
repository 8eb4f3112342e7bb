"""Packing: many token-id sequences -> one flat, padding-free stream.

A batch pools one vector per *segment*. Ordinarily a segment is a whole sequence. A
late-chunked document (engine/text/late_chunking.py) is one sequence of several segments, one per
chunk, and its special and prompt tokens belong to none: `segment_ids` says which segment each
token is pooled into (-1: none), and `cu_segments` how many segments the sequences before
each one hold, so that a batch can be cut at sequence boundaries.

Late interaction (a ColBERT model's rerank, engine/rose/layers/maxsim_head.py): a query's tokens carry
QUERY_TOKEN and pool into no row; the documents after it, up to the next query, each pool their kept
tokens into one row, where the engine writes the document's MaxSim score against that query. Such a
group stays whole: a batch of them is cut only before a query (`group_starts`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

# The segment id of a late-interaction query's token (any id below 0 pools into no row).
QUERY_TOKEN = -2
# The token id an image's sequence holds: a placeholder, since the vision tower reads the image's pixels.
IMAGE_TOKEN = 0


@dataclass(frozen=True)
class PackedBatch:
    """One batch as the model sees it, on the host.

    input_ids [T] and positions [T] are int32, cu_seqlens [B+1] int32 with
    cu_seqlens[0] == 0 and cu_seqlens[-1] == T. segment_ids [T] and cu_segments [B+1]
    (int32, both or neither) where a sequence pools into more than one vector; None: one
    vector per sequence. pixels [B, 3, S, S] float32 where the sequences are images (each of
    IMAGE_TOKEN ids, as many as the vision tower's sequence); None: texts.
    """

    input_ids: np.ndarray
    positions: np.ndarray
    cu_seqlens: np.ndarray
    max_seqlen: int
    segment_ids: np.ndarray | None = None  # the batch's segment each token is pooled into; < 0: none
    cu_segments: np.ndarray | None = None  # segments of the sequences before each one
    pixels: np.ndarray | None = None  # [B, 3, S, S] float32: the sequences are these images

    @property
    def is_images(self) -> bool:
        return self.pixels is not None

    @property
    def num_seqs(self) -> int:
        return len(self.cu_seqlens) - 1

    @property
    def num_tokens(self) -> int:
        return int(self.cu_seqlens[-1])

    @property
    def num_outputs(self) -> int:
        """Vectors the batch pools: one per segment."""
        return self.num_seqs if self.cu_segments is None else int(self.cu_segments[-1])

    @property
    def is_late_interaction(self) -> bool:
        """Its sequences are queries, each followed by the documents scored against it: its first token
        is a query's (a batch holds such groups only, engine/queue/piece_queue.py)."""
        ids = self.segment_ids
        return ids is not None and len(ids) > 0 and int(ids[0]) == QUERY_TOKEN

    def group_starts(self) -> np.ndarray:
        """[G] int64: the sequences a batch may be cut before, ascending from 0: each late-interaction
        query's, or every sequence where the batch holds none."""
        if not self.is_late_interaction:
            return np.arange(self.num_seqs)
        return np.flatnonzero(self.segment_ids[self.cu_seqlens[:-1]] == QUERY_TOKEN)

    def pooling_ids(self) -> np.ndarray:
        """[T] int32: the segment each token is pooled into (-1: none); ordinarily its sequence."""
        if self.segment_ids is not None:
            return self.segment_ids
        return np.repeat(np.arange(self.num_seqs, dtype=np.int32), np.diff(self.cu_seqlens))


def pack(seqs: list[np.ndarray], segments: list[np.ndarray | None] | None = None) -> PackedBatch:
    """Concatenate sequences; each must hold at least one token.

    `segments`, where given, holds per sequence None (one vector for the whole sequence) or
    its tokens' segment ids [len(seq)] int32, numbered from 0 within the sequence (-1: a
    token no segment reads; QUERY_TOKEN: a late-interaction query's, which pools into none either);
    every number up to the largest must be used.
    """
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int32, count=len(seqs))
    input_ids = np.concatenate(seqs).astype(np.int32, copy=False) if seqs else np.zeros(0, np.int32)
    batch = pack_flat(input_ids, lengths)
    if segments is None or all(ids is None for ids in segments):
        return batch
    local = [np.zeros(n, np.int32) if ids is None else np.asarray(ids, np.int32) for n, ids in zip(lengths, segments)]
    counts = np.fromiter((max(int(ids.max()) + 1, 0) for ids in local), dtype=np.int32, count=len(local))
    cu_segments = np.zeros(len(local) + 1, dtype=np.int32)
    np.cumsum(counts, out=cu_segments[1:])
    flat = np.concatenate(local)
    segment_ids = np.where(flat < 0, flat, flat + np.repeat(cu_segments[:-1], lengths)).astype(np.int32)
    return replace(batch, segment_ids=segment_ids, cu_segments=cu_segments)


def pack_pieces(seqs: list[np.ndarray], segments: list[np.ndarray | None] | None, max_tokens: int,
                max_outputs: int, pixels: np.ndarray | None = None) -> list[PackedBatch]:
    """The sequences packed (`pack`) and cut at sequence boundaries into pieces within both caps
    (`split_packed`): one piece where they all fit, views of the packed arrays otherwise. `pixels`
    [len(seqs), 3, S, S]: the sequences are these images (`pack_images`)."""
    batch = pack(seqs, segments) if pixels is None else pack_images(pixels, len(seqs[0]) if seqs else 1)
    return split_packed(batch, max_tokens, max_outputs)


def image_floats(image_size: int) -> int:
    """The floats of one image's pixels [3, image_size, image_size]."""
    return 3 * image_size * image_size


def pack_images(pixels: np.ndarray, seq_len: int) -> PackedBatch:
    """Images [B, 3, S, S] float32 as a batch: each a sequence of `seq_len` IMAGE_TOKEN ids (the vision
    tower's patches and class token), so that it counts what the tower computes."""
    lengths = np.full(len(pixels), seq_len, dtype=np.int32)
    batch = pack_flat(np.full(len(pixels) * seq_len, IMAGE_TOKEN, dtype=np.int32), lengths)
    return replace(batch, pixels=pixels)


def split_flat(input_ids: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    """Sequences laid end to end, back as one view per sequence (`pack`'s inverse on the ids).
    Slices with Python ints: np.split pays a few array calls per piece, more than a part's
    own tokenizing costs on the ASCII fast path."""
    ends = np.cumsum(lengths).tolist()
    return [input_ids[start:end] for start, end in zip([0, *ends[:-1]], ends)]


def pack_flat(input_ids: np.ndarray, lengths: np.ndarray) -> PackedBatch:
    """Sequences already laid end to end: input_ids [T] int32, lengths [B] int32 summing to T."""
    if len(lengths) == 0 or lengths.min() < 1:
        raise ValueError("a batch needs at least one sequence, each of at least one token")
    cu_seqlens = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=cu_seqlens[1:])
    # Position of each token inside its own sequence: global index minus its sequence start.
    starts = np.repeat(cu_seqlens[:-1], lengths)
    positions = np.arange(len(input_ids), dtype=np.int32) - starts
    return PackedBatch(input_ids, positions, cu_seqlens, int(lengths.max()))


def cut_batches(lengths: list[int], max_tokens: int, max_seqs: int) -> list[tuple[int, int]]:
    """Split a sequence of lengths, in order, into [lo, hi) ranges within both caps."""
    cu_seqlens = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=cu_seqlens[1:])
    return batch_ranges(cu_seqlens, max_tokens, max_seqs)


def batch_ranges(cu_seqlens: np.ndarray, max_tokens: int, max_seqs: int,
                 cu_segments: np.ndarray | None = None) -> list[tuple[int, int]]:
    """[lo, hi) ranges of sequences, in order, each within both caps (a longer sequence alone).

    `max_seqs` caps the vectors a range pools: its sequences, or its segments where
    `cu_segments` is given. Greedy, as a batch fills: a range ends before the first sequence
    that would take it past a cap. One search per range, not a Python step per sequence.
    """
    num_seqs = len(cu_seqlens) - 1
    ranges, lo = [], 0
    while lo < num_seqs:
        fits = int(np.searchsorted(cu_seqlens, int(cu_seqlens[lo]) + max_tokens, side="right")) - 1
        hi = min(max(fits, lo + 1), lo + max_seqs, num_seqs)
        if cu_segments is not None:
            fits = int(np.searchsorted(cu_segments, int(cu_segments[lo]) + max_seqs, side="right")) - 1
            hi = min(hi, max(fits, lo + 1))
        ranges.append((lo, hi))
        lo = hi
    return ranges


def slice_packed(batch: PackedBatch, lo: int, hi: int) -> PackedBatch:
    """Sequences [lo, hi) of a batch, as a batch of their own (views of its token arrays)."""
    cu = batch.cu_seqlens[lo : hi + 1]
    start, end = int(cu[0]), int(cu[-1])
    segment_ids = cu_segments = None
    if batch.cu_segments is not None:
        cu_segments = batch.cu_segments[lo : hi + 1]
        first = int(cu_segments[0])
        ids = batch.segment_ids[start:end]
        segment_ids = np.where(ids < 0, ids, ids - first).astype(np.int32) if first else ids
        cu_segments = (cu_segments - first).astype(np.int32)
    pixels = batch.pixels[lo:hi] if batch.pixels is not None else None
    return PackedBatch(batch.input_ids[start:end], batch.positions[start:end], (cu - start).astype(np.int32),
                       int(np.diff(cu).max()), segment_ids, cu_segments, pixels)


def join_packed(*batches: PackedBatch) -> PackedBatch:
    """The sequences of each batch in turn, as one batch (its vectors are theirs, in order): all texts,
    or all images."""
    pixels = None
    if any(b.is_images for b in batches):
        if not all(b.is_images for b in batches):
            raise ValueError("a batch holds images or texts, not both")
        pixels = np.concatenate([b.pixels for b in batches])
    token_offsets = np.cumsum([0] + [b.num_tokens for b in batches[:-1]])
    cu_seqlens = np.concatenate([batches[0].cu_seqlens[:1]]
                                + [b.cu_seqlens[1:] + offset for b, offset in zip(batches, token_offsets)])
    segment_ids = cu_segments = None
    if any(b.cu_segments is not None for b in batches):
        output_offsets = np.cumsum([0] + [b.num_outputs for b in batches[:-1]])
        pooling = [b.pooling_ids() for b in batches]
        segment_ids = np.concatenate([np.where(ids < 0, ids, ids + offset)
                                      for ids, offset in zip(pooling, output_offsets)])
        cu_segments = np.concatenate([np.zeros(1, np.int32)]
                                     + [_cu_segments(b)[1:] + offset for b, offset in zip(batches, output_offsets)])
        segment_ids, cu_segments = segment_ids.astype(np.int32), cu_segments.astype(np.int32)
    return PackedBatch(np.concatenate([b.input_ids for b in batches]), np.concatenate([b.positions for b in batches]),
                       cu_seqlens.astype(np.int32), max(b.max_seqlen for b in batches), segment_ids, cu_segments,
                       pixels)


def _cu_segments(batch: PackedBatch) -> np.ndarray:
    if batch.cu_segments is not None:
        return batch.cu_segments
    return np.arange(batch.num_seqs + 1, dtype=np.int32)


def split_packed(batch: PackedBatch, max_tokens: int, max_outputs: int | None = None) -> list[PackedBatch]:
    """Cut a batch, in order and at sequence boundaries, into batches of at most max_tokens and
    max_outputs vectors (a longer sequence is a batch of its own). Rejoining their results row by
    row gives the whole batch's: attention and pooling never cross a sequence boundary. A batch of
    late-interaction groups is cut between groups only, each within max_tokens and max_outputs
    sequences (a graph's key counts its sequences too, and a group holds one more than its rows)."""
    max_outputs = batch.num_outputs if max_outputs is None else max_outputs
    is_grouped = batch.is_late_interaction
    num_units = batch.num_seqs if is_grouped else batch.num_outputs
    if batch.num_tokens <= max_tokens and num_units <= max_outputs:
        return [batch]
    if is_grouped:
        bounds = np.append(batch.group_starts(), batch.num_seqs)
        ranges = [(int(bounds[lo]), int(bounds[hi]))
                  for lo, hi in batch_ranges(batch.cu_seqlens[bounds], max_tokens, max_outputs, bounds)]
    else:
        ranges = batch_ranges(batch.cu_seqlens, max_tokens, max_outputs, batch.cu_segments)
    return [batch] if len(ranges) == 1 else [slice_packed(batch, lo, hi) for lo, hi in ranges]
