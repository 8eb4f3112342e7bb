"""How bench/heads.py lays out and runs each head's inputs: the benchmark's documents as the server would
hand them to the engine, the engine's loop over them, and a head's answers per text.

Layouts (the pooling segments a text is packed with, engine/contract/batch.py):

  text      one segment per text, one answer row (dense, sparse, classifier, BGE-M3 dense-only)
  colbert   a PyLate document: its ids cut to document_length - 1, the document prefix after the first
            token, each kept token a segment and a row, the skiplist's tokens in none
            (engine/text/colbert_tokens.py lays out a tokenized text so)
  tokens    every token a segment and a row (engine/contract/m3_rows.py's token_segments): BGE-M3 asked
            for sparse or colbert outputs, as server/pipeline/m3_ask.py lays out such a request's texts

The loop is bench/gpu_bench.py's `run_ours` with segments: batches cut by the token budget and by the
rows they pool (batch_ranges, as the queue cuts them: --max-batch-seqs caps rows, not texts), packed
and launched one ahead of the batch read back into one buffer made once.
"""

from __future__ import annotations

import numpy as np
from rose_embed.engine.contract import m3_rows
from rose_embed.engine.contract.batch import batch_ranges, pack
from rose_embed.engine.model_files.colbert import ColbertModel

LAYOUTS = ("text", "colbert", "tokens")


def colbert_documents(colbert: ColbertModel, docs: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(ids, segment ids) per document, as a ColBERT model's documents reach the engine."""
    skiplist = np.fromiter(colbert.skiplist_ids, dtype=np.int32)
    limit = colbert.document_length - (colbert.document_prefix_id is not None)
    seqs, segments = [], []
    for doc in docs:
        ids = np.asarray(doc[:limit], dtype=np.int32)
        if colbert.document_prefix_id is not None:
            ids = np.concatenate([ids[:1], np.asarray([colbert.document_prefix_id], np.int32), ids[1:]])
        kept = ~np.isin(ids, skiplist)
        seqs.append(ids)
        segments.append(np.where(kept, np.cumsum(kept) - 1, -1).astype(np.int32))
    return seqs, segments


def lay_out(layout: str, engine, docs: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """(ids, segment ids or None) per document for `layout`."""
    if layout == "text":
        return docs, None
    if layout == "colbert":
        return colbert_documents(engine.spec.colbert, docs)
    return docs, [m3_rows.token_segments(seq) for seq in docs]


def rows_per_text(seqs: list[np.ndarray], segments: list[np.ndarray] | None) -> np.ndarray:
    """[N] int64: the answer rows each text pools."""
    if segments is None:
        return np.ones(len(seqs), dtype=np.int64)
    return np.fromiter((int(ids.max()) + 1 if len(ids) else 0 for ids in segments), dtype=np.int64,
                       count=len(segments))


def run_segmented(runner, seqs: list[np.ndarray], segments: list[np.ndarray] | None, max_batch_tokens: int,
                  max_batch_rows: int, out: np.ndarray | None = None) -> np.ndarray:
    """The engine's loop over `seqs`: every row lands in `out` [total rows, width] (made here when not given),
    in order. Batch N+1 is launched before batch N is read back, as gpu_bench's run_ours does."""
    cu_seqlens = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in seqs], out=cu_seqlens[1:])
    cu_rows = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum(rows_per_text(seqs, segments), out=cu_rows[1:])
    pending = None
    for lo, hi in batch_ranges(cu_seqlens, max_batch_tokens, max_batch_rows, None if segments is None else cu_rows):
        result = runner.execute(pack(seqs[lo:hi], None if segments is None else segments[lo:hi]))
        if pending is not None:
            out = land_rows(pending, out, int(cu_rows[-1]))
        pending = (result, int(cu_rows[lo]), int(cu_rows[hi]))
    return land_rows(pending, out, int(cu_rows[-1]))


def land_rows(pending: tuple, out: np.ndarray | None, num_rows: int) -> np.ndarray:
    """(a launched batch's result, its first row, its end) -> `out` [num_rows, width] (made here at the first
    batch) with the batch's rows read back into their place (also bench/gpu_bench.py's loop)."""
    result, lo, hi = pending
    rows = result.wait()
    if out is None:
        out = np.empty((num_rows, rows.shape[1]), np.float32)
    out[lo:hi] = rows
    return out


def per_text(rows: np.ndarray, counts: np.ndarray) -> list[np.ndarray]:
    """A pass's rows cut into each text's."""
    return np.split(rows, np.cumsum(counts)[:-1])


def answer_rows(engine, seqs: list[np.ndarray], segments: list[np.ndarray] | None) -> list[np.ndarray]:
    """Each text's rows from one batch of `seqs`, run as often as its bucket needs to replay a captured graph
    (every slot eager, then captured, then replayed): the answers a served batch gives."""
    graphs = engine.runner.graphs
    for _ in range(1 + 2 * (graphs.num_slots if graphs is not None else 0)):
        rows = engine.execute_packed(pack(seqs, segments)).wait()
    return per_text(rows, rows_per_text(seqs, segments))
