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
"""

from __future__ import annotations

import json
import re

from tokenizers import Tokenizer

# Control characters the normaliser removes (and that Rust and Python disagree on as
# whitespace); tab, newline and carriage return are whitespace to both.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_WORDS = {
    True: re.compile(r"[a-z0-9]+|[^a-z0-9\s]"),
    False: re.compile(r"[A-Za-z0-9]+|[^A-Za-z0-9\s]"),
}
_CACHE_LIMIT = 1 << 20  # distinct words kept; a vocabulary of real text stays far below it


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
        self._prefix, self._suffix = list(prefix), list(suffix)
        self._content_limit = max_len - len(prefix) - len(suffix)
        # Added tokens match the raw text, before the normaliser: where one may occur, Rust decides.
        self._added = re.compile("|".join(re.escape(t) for t in sorted(added_tokens, key=len, reverse=True))) \
            if added_tokens else None
        self._cache: dict[str, tuple[int, ...]] = {}

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

    def _chunk_ids(self, chunk: str) -> tuple[int, ...]:
        tokenize = self._model.tokenize
        ids = tuple(token.id for word in self._words.findall(chunk) for token in tokenize(word))
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[chunk] = ids
        return ids

    def encode(self, text: str) -> list[int] | None:
        """The ids with special tokens, truncated; None where the Rust tokenizer must decide."""
        if not text.isascii() or _CONTROL.search(text):
            return None
        raw = text
        if self._lowercase:
            text = text.lower()
        if self._added is not None and (self._added.search(raw) or self._added.search(text)):
            return None
        limit = self._content_limit
        content: list[int] = []
        cache, chunk_ids = self._cache, self._chunk_ids
        # Every chunk gives at least one token, so the first `limit` chunks reach the limit: what
        # lies past them stays one unsplit remainder, never read.
        for chunk in text.split(None, limit):
            ids = cache.get(chunk)
            content += ids if ids is not None else chunk_ids(chunk)
            if len(content) >= limit:
                del content[limit:]
                break
        return self._prefix + content + self._suffix
