"""A fast path for BERT-style (WordPiece) tokenizers on plain ASCII text, exact to the Rust one.

For such a tokenizer the Rust library normalises each character (with alignment bookkeeping),
splits on whitespace and punctuation, runs WordPiece per word, and builds an Encoding object
with token strings, offsets and masks for every text, of which the server reads only the ids.
That costs microseconds per token, and on a GPU machine it is most of what the front end does.

On ASCII text with no control characters the pipeline reduces to this: lowercase (if the
normaliser does), split into runs of letters and digits and single punctuation characters
(BERT counts every printable non-alphanumeric ASCII character as punctuation), and map each
word to its WordPiece ids. Text is cut at whitespace first (str.split, in C), and each
whitespace-separated chunk ("value,", "f(x)") maps to the ids of its words; chunks repeat a
great deal, so each chunk's ids are computed once, with the Rust tokenizer's own WordPiece
model for each word, and then looked up. Any text outside that case (a
non-ASCII or control character, or the text of an added token such as "[MASK]", which the
Rust tokenizer matches before normalising) goes to the Rust tokenizer unchanged, and so does
any tokenizer whose pipeline is not exactly this one.

Many texts at once (`encode_packed`) take the same steps with one Python step per piece rather
than per word: the texts are joined around a separator chunk that no such text contains, split
once, every chunk looked up through `map`, and the ids cut back into texts, truncated and
wrapped with array operations.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from itertools import chain

import numpy as np

from tokenizers import Tokenizer

# Control characters the normaliser removes (and that Rust and Python disagree on as
# whitespace); tab, newline and carriage return are whitespace to both.
_CONTROL_CHARS = r"\x00-\x08\x0b\x0c\x0e-\x1f\x7f"
_CONTROL = re.compile(f"[{_CONTROL_CHARS}]")
# What the Rust tokenizer decides: a control character or any non-ASCII one. To find where they
# are; whether a text has any is `isascii` and _CONTROL, the faster test.
_OFF_PATH = re.compile(rf"[{_CONTROL_CHARS}]|[^\x00-\x7f]")
_WORDS = {
    True: re.compile(r"[a-z0-9]+|[^a-z0-9\s]"),
    False: re.compile(r"[A-Za-z0-9]+|[^A-Za-z0-9\s]"),
}
_CACHE_LIMIT = 1 << 20  # distinct words kept; a vocabulary of real text stays far below it
# Joins a piece's texts: a chunk of its own (spaces around it) that no text on the fast path holds
# (a control character), looked up as a token id no vocabulary has. Ids are cached as int32 bytes,
# which join into one array without a Python object per id.
_SEPARATOR, _SEPARATOR_ID = "\x00", -1
_SEPARATOR_IDS = np.array([_SEPARATOR_ID], np.int32).tobytes()


def _lowercases(normalizer: dict | None) -> bool | None:
    """Whether a BERT normaliser (alone, or after a Lowercase step) lowercases; None: another normaliser."""
    if normalizer is None:
        return None
    if normalizer.get("type") == "BertNormalizer":
        return bool(normalizer.get("lowercase"))
    steps = normalizer.get("normalizers") if normalizer.get("type") == "Sequence" else None
    if steps and all(s.get("type") in ("Lowercase", "BertNormalizer") for s in steps) \
            and steps[-1].get("type") == "BertNormalizer":
        return any(s.get("type") == "Lowercase" or s.get("lowercase") for s in steps)
    return None


class AsciiWordPiece:
    """Token ids of ASCII texts, wrapped and truncated as the Rust tokenizer does; None for the rest."""

    def __init__(self, tokenizer: Tokenizer, lowercase: bool, prefix: tuple[int, ...], suffix: tuple[int, ...],
                 max_len: int, added_tokens: list[str]):
        self._model = tokenizer.model
        self._words = _WORDS[lowercase]
        self._lowercase = lowercase
        self._prefix, self._suffix = np.array(prefix, np.int32), np.array(suffix, np.int32)
        self._content_limit = max_len - len(prefix) - len(suffix)
        # Added tokens match the raw text, before the normaliser: where one may occur, Rust decides.
        self._added_tokens = added_tokens
        self._added = re.compile("|".join(re.escape(t) for t in sorted(added_tokens, key=len, reverse=True))) \
            if added_tokens else None
        # Matched across the newline that joins two texts, an added token would hide the texts' own matches.
        self._added_spans_lines = any("\n" in token for token in added_tokens)
        self._cache: dict[str, bytes] = {_SEPARATOR: _SEPARATOR_IDS}
        # Longer texts are cut after their first `limit` chunks before joining: the rest is never read.
        self._long_text_chars = 4 * max_len

    @classmethod
    def for_tokenizer(cls, tokenizer: Tokenizer, prefix: tuple[int, ...], suffix: tuple[int, ...],
                      max_len: int) -> AsciiWordPiece | None:
        """The fast path for a tokenizer that is exactly BERT's pipeline; None for any other."""
        config = json.loads(tokenizer.to_str())
        lowercase = _lowercases(config.get("normalizer"))
        pre = config.get("pre_tokenizer") or {}
        model = config.get("model") or {}
        truncation = config.get("truncation") or {}
        if lowercase is None or pre.get("type") != "BertPreTokenizer" or model.get("type") != "WordPiece":
            return None
        if truncation.get("direction", "Right") != "Right" or truncation.get("stride", 0) != 0:
            return None
        if max_len <= len(prefix) + len(suffix):
            return None
        added = [t["content"] for t in config.get("added_tokens") or []]
        # Searched for in the raw text and the lowered one: an added token that is normalised matches
        # the lowered text, one that is not matches the raw text.
        added = sorted({spelling for t in added for spelling in (t, t.lower())})
        return cls(tokenizer, lowercase, prefix, suffix, max_len, added)

    def _chunk_ids(self, chunk: str) -> bytes:
        tokenize = self._model.tokenize
        ids = np.array([token.id for word in self._words.findall(chunk) for token in tokenize(word)], np.int32)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
            self._cache[_SEPARATOR] = _SEPARATOR_IDS
        # Returned from here, not read back: another thread may clear the cache in between.
        self._cache[chunk] = data = ids.tobytes()
        return data

    def _is_plain(self, text: str) -> bool:
        """Whether the fast path gives the Rust tokenizer's ids for this text."""
        if not text.isascii() or _CONTROL.search(text):
            return False
        if self._added is None:
            return True
        lowered = text.lower() if self._lowercase else text
        return not any(token in text or token in lowered for token in self._added_tokens)

    def _off_path(self, texts: Sequence[str]) -> list[int]:
        """The indices of the texts the fast path leaves to the Rust tokenizer, in order; the texts
        are scanned joined, so that the usual piece, all of it plain, costs one scan."""
        joined = "\n".join(texts)
        if self._is_plain(joined):
            return []
        lowered = joined.lower() if self._lowercase else joined
        # Positions in the lowered text are those in the text unless lowering changed a length ("İ").
        if self._added_spans_lines or len(lowered) != len(joined):
            return [i for i, text in enumerate(texts) if not self._is_plain(text)]
        scans = [_OFF_PATH.finditer(joined)]
        if self._added is not None:
            scans += [self._added.finditer(joined), self._added.finditer(lowered)]
        ends = np.cumsum([len(text) + 1 for text in texts])  # where each text's newline stands
        starts = [match.start() for match in chain.from_iterable(scans)]
        return sorted(set(np.searchsorted(ends, starts, side="right").tolist()))

    def encode(self, text: str) -> np.ndarray | None:
        """The ids with special tokens, truncated; None where the Rust tokenizer must decide."""
        if not self._is_plain(text):
            return None
        if self._lowercase:
            text = text.lower()
        limit = self._content_limit
        parts, num_bytes = [], 0
        cache, chunk_ids = self._cache, self._chunk_ids
        # Every chunk gives at least one token, so the first `limit` chunks reach the limit: what
        # lies past them stays one unsplit remainder, never read.
        for chunk in text.split(None, limit):
            ids = cache.get(chunk) or chunk_ids(chunk)
            parts.append(ids)
            num_bytes += len(ids)
            if num_bytes >= 4 * limit:
                break
        content = np.frombuffer(b"".join(parts), np.int32)[:limit]
        return np.concatenate((self._prefix, content, self._suffix))

    def encode_packed(self, texts: Sequence[str],
                      rust_ids: Callable[[list[str]], list[list[int]]]) -> tuple[np.ndarray, np.ndarray]:
        """The texts' ids laid end to end (int32) and each text's number of ids, as `encode` gives
        them; the texts off the fast path go to `rust_ids` together."""
        rest = self._off_path(texts)
        if not rest:
            return self._encode_plain(texts)
        plain = sorted(set(range(len(texts))).difference(rest))
        flat, lengths = self._encode_plain([texts[i] for i in plain])
        rest_ids = rust_ids([texts[i] for i in rest])
        all_lengths = np.zeros(len(texts), np.int32)
        all_lengths[plain] = lengths
        all_lengths[rest] = [len(ids) for ids in rest_ids]
        starts = np.zeros(len(texts) + 1, np.int64)
        np.cumsum(all_lengths, out=starts[1:])
        out = np.empty(int(starts[-1]), np.int32)
        plain_starts = np.zeros(len(plain) + 1, np.int64)
        np.cumsum(lengths, out=plain_starts[1:])
        # Each plain text's ids move from its place in `flat` to its place among all the texts.
        shift = np.repeat(starts[plain] - plain_starts[:-1], lengths)
        out[np.arange(len(flat)) + shift] = flat
        for i, ids in zip(rest, rest_ids):
            out[starts[i] : starts[i + 1]] = ids
        return out, all_lengths

    def _encode_plain(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """`encode_packed` for texts that all take the fast path."""
        limit, num_texts = self._content_limit, len(texts)
        if num_texts == 0:
            return np.zeros(0, np.int32), np.zeros(0, np.int32)
        long_texts = [i for i, n in enumerate(map(len, texts)) if n > self._long_text_chars]
        if long_texts:
            texts = list(texts)
            for i in long_texts:
                texts[i] = " ".join(texts[i].split(None, limit)[:limit])
        joined = f" {_SEPARATOR} ".join(texts)
        chunks = (joined.lower() if self._lowercase else joined).split()
        cache = self._cache
        ids = list(map(cache.get, chunks))
        try:
            content = np.frombuffer(b"".join(ids), np.int32)
        except TypeError:  # a None: words not seen before, each tokenized once by the Rust WordPiece model
            at = ids.index(None)
            while True:
                ids[at] = cache.get(chunks[at]) or self._chunk_ids(chunks[at])
                try:
                    at = ids.index(None, at + 1)
                except ValueError:
                    break
            content = np.frombuffer(b"".join(ids), np.int32)
        # Text i's content lies between separators i - 1 and i.
        separators = np.flatnonzero(content == _SEPARATOR_ID)
        content_starts = np.concatenate(([0], separators + 1))
        content_lengths = np.concatenate((separators, [len(content)])) - content_starts
        kept = np.minimum(content_lengths, limit)
        prefix, suffix = len(self._prefix), len(self._suffix)
        lengths = (kept + prefix + suffix).astype(np.int32)
        starts = np.zeros(num_texts + 1, np.int64)
        np.cumsum(lengths, out=starts[1:])
        out = np.empty(int(starts[-1]), np.int32)
        for j, token in enumerate(self._prefix.tolist()):
            out[starts[:-1] + j] = token
        for j, token in enumerate(self._suffix.tolist()):
            out[starts[:-1] + prefix + kept + j] = token
        text_of = np.repeat(np.arange(num_texts), content_lengths + 1)[: len(content)]
        rank = np.arange(len(content)) - content_starts[text_of]
        keep = (rank < kept[text_of]) & (content != _SEPARATOR_ID)
        out[(starts[:-1] + prefix)[text_of[keep]] + rank[keep]] = content[keep]
        return out, lengths
