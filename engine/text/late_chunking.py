"""Late chunking: each chunk of a document embedded in the context of the whole document.

For a model with bidirectional attention and mean pooling, a document given as its chunks
in order runs as one sequence, wrapped as the tokenizer wraps one text, with the prompt
(if any) after the leading special tokens:

    [CLS] + prompt + ids(chunk 1) + ids(chunk 2) + ... + ids(chunk n) + [SEP]

each chunk tokenized alone, without special tokens. Every token attends to the whole
document; each chunk's vector is the mean of the final hidden states over its own tokens
(the special and prompt tokens are in no chunk's mean), then the model's modules after
pooling (Dense, Normalize, ...) apply to it as to any pooled vector ("late chunking",
Günther et al. 2024). engine/contract/batch.py carries the chunks as pooling segments.

A document longer than the model's limit is cut at chunk boundaries into windows, each
wrapped the same way and filled greedily with whole chunks in order. A chunk that does not
fit in a window by itself follows the long-inputs mode (engine/config.LONG_INPUT_MODES):
"truncate" keeps its first tokens, "error" raises ChunkTooLongError, "chunk" fills the room
left in the current window and continues in the next ones, and gets the token-weighted mean
of its parts' vectors (as engine/text/long_inputs.py combines a text's windows). A window also holds at most `max_chunks`
segments: the vectors one batch can pool (the engine's max_batch_seqs).

These functions see token ids and vectors only; the server's route and the corpus job call them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rose_embed.engine.text.long_inputs import CannotWindowError, InputTooLongError, combine_windows


class CannotLateChunkError(ValueError):
    """The model cannot embed chunks in the context of their document (the message says why)."""


class EmptyChunkError(ValueError):
    """A chunk gives no token of its own, so no mean of its tokens exists."""

    def __init__(self, document: int, chunk: int):
        super().__init__(f"chunk {chunk} of document {document} gives no tokens")
        self.document, self.chunk = document, chunk


class ChunkTooLongError(InputTooLongError):
    """A chunk does not fit in a window by itself, and the mode is "error"."""

    def __init__(self, document: int, chunk: int, num_tokens: int, max_seq_len: int):
        super().__init__(document, num_tokens, max_seq_len)
        self.document, self.chunk = document, chunk
        self.args = (f"chunk {chunk} of document {document} needs {num_tokens} tokens with the special tokens, "
                     f"more than the model's limit of {max_seq_len}",)

    def __reduce__(self):
        return type(self), (self.document, self.chunk, self.num_tokens, self.max_seq_len)


def late_chunking_problem(spec) -> str | None:
    """Why a model (engine/model_files/loader.py's ModelSpec) cannot late-chunk, or None when it can."""
    if spec.is_causal:
        return ("its attention is causal, so a chunk's tokens would see only the chunks before them, not the "
                "whole document")
    if spec.pooling != "mean":
        return (f"its pooling is {spec.pooling!r}, and a chunk's vector is the mean of its own tokens' states, "
                "which is the model's own vector only for a mean-pooling model")
    return None


@dataclass(frozen=True)
class Window:
    """One sequence the model runs: its token ids and the segment each token is pooled into."""

    ids: np.ndarray  # [n] int32
    segment_ids: np.ndarray  # [n] int32: 0, 1, ... per chunk (or chunk part) in order; -1 for special / prompt tokens


@dataclass(frozen=True)
class LateChunkedDocuments:
    """Documents as the windows the model runs, and how their segments' vectors become one per chunk."""

    windows: list[Window]
    num_chunks: list[int]  # per document
    chunk_of: np.ndarray  # per segment, in window order: the chunk it belongs to (counting every document's)
    weights: np.ndarray  # per segment: its tokens

    @property
    def num_inputs(self) -> int:
        """Documents."""
        return len(self.num_chunks)

    @property
    def seqs(self) -> list[np.ndarray]:
        return [w.ids for w in self.windows]

    @property
    def segments(self) -> list[np.ndarray]:
        return [w.segment_ids for w in self.windows]

    @property
    def num_tokens(self) -> int:
        return sum(len(w.ids) for w in self.windows)

    def combine(self, vectors: np.ndarray, normalize: bool) -> np.ndarray:
        """[segments, dim] -> [chunks, dim]: a chunk cut across windows gets the token-weighted
        mean of its parts' vectors; every other chunk keeps its vector as it is."""
        num_chunks = sum(self.num_chunks)
        if len(self.chunk_of) == num_chunks:
            return vectors
        out = np.empty((num_chunks, vectors.shape[1]), dtype=np.float32)
        starts = np.flatnonzero(np.diff(self.chunk_of, prepend=-1))  # each chunk's first segment (chunk_of ascends)
        for chunk, (lo, hi) in enumerate(zip(starts, [*starts[1:], len(self.chunk_of)])):
            out[chunk] = vectors[lo] if hi - lo == 1 else combine_windows(vectors[lo:hi], self.weights[lo:hi], normalize)
        return out


def fit_documents(tokenizer, mode: str, documents: list[list[str]], prompt: str, max_chunks: int) -> LateChunkedDocuments:
    """Tokenize every chunk alone and cut the documents into windows (this module's docstring).

    `tokenizer` is engine.text.tokenizer.TextTokenizer; `mode` one of engine.contract.config.LONG_INPUT_MODES.
    Raises EmptyChunkError, ChunkTooLongError (mode "error") and CannotWindowError.
    """
    try:
        before, after = tokenizer.wrapping()
    except ValueError as exc:
        raise CannotWindowError(str(exc)) from exc
    if prompt:
        before = (*before, *tokenizer.encode_untruncated([prompt], add_special_tokens=False)[0])
    flat = [chunk for document in documents for chunk in document]
    ids = tokenizer.encode_untruncated(flat, add_special_tokens=False) if flat else []
    windows: list[Window] = []
    chunk_of: list[int] = []
    weights: list[int] = []
    first = 0
    for d, document in enumerate(documents):
        chunks = ids[first : first + len(document)]
        for c, chunk in enumerate(chunks):
            if not chunk:
                raise EmptyChunkError(d, c)
        cut = document_windows(chunks, before, after, tokenizer.max_seq_len, max_chunks, mode, d)
        for window, parts in cut:
            windows.append(window)
            chunk_of.extend(first + chunk for chunk, _ in parts)
            weights.extend(size for _, size in parts)
        first += len(document)
    return LateChunkedDocuments(windows, [len(d) for d in documents], np.asarray(chunk_of, dtype=np.int64),
                                np.asarray(weights, dtype=np.int64))


def document_windows(chunks: list[list[int]], before: tuple[int, ...], after: tuple[int, ...], max_seq_len: int,
                     max_chunks: int, mode: str, document: int = 0) -> list[tuple[Window, list[tuple[int, int]]]]:
    """One document's chunks (token ids, none empty) -> its windows, each with its segments as
    (chunk index in the document, tokens), in order."""
    room = max_seq_len - len(before) - len(after)
    if room < 1:
        raise CannotWindowError(f"the special and prompt tokens ({len(before) + len(after)}) leave no room for "
                                f"the text in the model's limit of {max_seq_len} tokens")
    out: list[tuple[Window, list[tuple[int, int]]]] = []
    pieces: list[tuple[int, list[int]]] = []  # the window being filled: (chunk index, its tokens here)

    def close() -> None:
        ids = [*before, *(t for _, part in pieces for t in part), *after]
        segment_ids = [-1] * len(before)
        for k, (_, part) in enumerate(pieces):
            segment_ids += [k] * len(part)
        segment_ids += [-1] * len(after)
        out.append((Window(np.asarray(ids, np.int32), np.asarray(segment_ids, np.int32)),
                    [(c, len(part)) for c, part in pieces]))
        pieces.clear()

    for c, chunk in enumerate(chunks):
        if len(chunk) > room and mode == "error":
            raise ChunkTooLongError(document, c, len(chunk) + len(before) + len(after), max_seq_len)
        if len(chunk) > room and mode == "truncate":
            chunk = chunk[:room]
        # A chunk that fits a window starts a new one where the current one lacks room for it;
        # a longer one (mode "chunk") fills the current window's room and continues in the next.
        fits = len(chunk) <= room
        rest = chunk
        while rest:
            used = sum(len(p) for _, p in pieces)
            if pieces and (used >= room or len(pieces) >= max_chunks or (fits and used + len(rest) > room)):
                close()
                used = 0
            pieces.append((c, rest[: room - used]))
            rest = rest[room - used:]
    if pieces:
        close()
    return out
