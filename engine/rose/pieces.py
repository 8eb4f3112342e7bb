"""One piece of the pipeline's texts, tokenized: what a tokenizer thread or process hands back.

Free of torch and of the model, so that a tokenizer process (engine/rose/tokenizer_processes.py)
imports no more than the tokenizer needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rose_embed.engine.contract.batch import PackedBatch, pack
from rose_embed.engine.text.late_chunking import LateChunkedDocuments
from rose_embed.engine.text.long_inputs import FittedInputs, InputTooLongError, fit_texts


@dataclass(frozen=True)
class Piece:
    """A piece's texts as the model takes them: a sequence each, or an over-long text's windows
    in its place, or late-chunked documents' windows (then `fitted` combines the vectors of the
    batch's segments into one per text, or per chunk)."""

    batch: PackedBatch
    fitted: FittedInputs | LateChunkedDocuments | None = None

    @property
    def num_texts(self) -> int:
        return self.batch.num_seqs if self.fitted is None else self.fitted.num_inputs


def tokenize_piece(tokenizer, texts: Sequence[str], first: int, prompt: str, long_inputs: str) -> Piece:
    """One piece: packed straight from the encodings where every text fits (the common case),
    else through long_inputs' fitting of the few that may not. `first` is where the piece's
    first text stands in the whole stream, for an error's index."""
    batch = tokenizer.encode_packed([prompt + text for text in texts] if prompt else texts)
    if long_inputs == "truncate" or batch.max_seqlen < tokenizer.max_seq_len:
        return Piece(batch)
    cu = batch.cu_seqlens.tolist()
    seqs = [batch.input_ids[start:end] for start, end in zip(cu, cu[1:])]
    try:
        fitted = fit_texts(tokenizer, long_inputs, list(texts), prompt, seqs)
    except InputTooLongError as exc:
        raise InputTooLongError(first + exc.index, exc.num_tokens, exc.max_seq_len) from None
    return Piece(batch) if len(fitted.seqs) == len(seqs) else Piece(pack(fitted.seqs), fitted)
