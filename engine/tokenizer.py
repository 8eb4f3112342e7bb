"""Text -> token ids, truncated to the model's limit the way sentence-transformers does it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tokenizers import Tokenizer


class TextTokenizer:
    """A fast (Rust) tokenizer configured for embedding: truncation on, padding off.

    `encode` is safe to call from several threads at once; the Rust batch encoder
    releases the GIL and spreads one batch over the machine's cores.
    """

    def __init__(self, model_dir: Path, max_seq_len: int):
        self.max_seq_len = max_seq_len
        self._tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=max_seq_len)
        self.vocab_size = self._tokenizer.get_vocab_size(with_added_tokens=True)
        # Skipping offsets makes batch encoding noticeably faster where available.
        self._encode_batch = getattr(
            self._tokenizer, "encode_batch_fast", self._tokenizer.encode_batch
        )

    def encode(self, texts: list[str]) -> list[np.ndarray]:
        """Token ids (int32) per text, special tokens added, truncated to max_seq_len.

        Texts are stripped first, as sentence-transformers does before tokenizing.
        """
        encodings = self._encode_batch([t.strip() for t in texts], add_special_tokens=True)
        return [np.asarray(e.ids, dtype=np.int32) for e in encodings]

    def truncate_ids(self, ids: list[int]) -> np.ndarray:
        """Caller-given token ids, used as they are and cut to max_seq_len."""
        return np.asarray(ids[: self.max_seq_len], dtype=np.int32)

    def decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids)
