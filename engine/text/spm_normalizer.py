"""SentencePiece's normalizer (normalizer.cc's Normalize), step for step, in Python: the tokenizers
library's Precompiled normalizer looks rules up per grapheme cluster and keeps the shortest rule that
prefixes one, so it drops the rest of a cluster such as "＜" + a combining accent, where SentencePiece
replaces the longest rule at each position and goes on after it.

1. the character map's rules (engine/model_files/spm_charsmap.py), the longest at each position;
2. with remove_extra_whitespaces: leading spaces dropped, a replacement's leading spaces dropped after one
   that ends with a space (runs of spaces become one), trailing spaces dropped (after step 4, so "▁"s a
   text ends with go too);
3. the dummy "▁" prefix where add_dummy_prefix and anything is left;
4. spaces written as "▁".
Where no rule longer than one character can apply (a text holds none of their later characters), step 1
is str.translate over the one-character rules, and step 2 acts on the whole text at once; both give what
the position by position walk gives. The normalized text is what the unigram model segments.
"""

from __future__ import annotations

import re

from rose_embed.engine.model_files.spm_charsmap import CharsMap
from rose_embed.engine.model_files.spm_proto import SPACE_SYMBOL, SentencePieceModel

_SPACE_RUNS = re.compile(" {2,}")


class SentencePieceNormalizer:
    def __init__(self, model: SentencePieceModel):
        charsmap = CharsMap(model.precompiled_charsmap) if model.precompiled_charsmap else None
        self._charsmap = charsmap
        single = charsmap.single if charsmap else {}
        self._table = str.maketrans(single)
        # Characters that send a text the slow way: the later characters of longer rules (only where a text
        # holds one may such a rule apply), and one-character rules whose replacement holds a run of spaces
        # (SentencePiece keeps a run inside one replacement; the whole-text way would make it one space).
        self._slow_chars = (charsmap.later_chars if charsmap else frozenset()) | {
            char for char, replacement in single.items() if "  " in replacement}
        self._remove_extra_whitespaces = model.remove_extra_whitespaces
        self._add_dummy_prefix = model.add_dummy_prefix

    def normalize(self, text: str) -> str:
        if not text:
            return ""
        if self._slow_chars.isdisjoint(text):
            replaced = text.translate(self._table)
            if self._remove_extra_whitespaces:
                replaced = _SPACE_RUNS.sub(" ", replaced.lstrip(" "))
            return self._finish(replaced)
        return self._finish(self._walk(text))

    def _walk(self, text: str) -> str:
        """Steps 1 and 2's leading and repeated spaces, a replacement at a time, as normalizer.cc does."""
        out, at, is_prev_space = [], 0, self._remove_extra_whitespaces
        while at < len(text):
            length, piece = self._charsmap.longest_match(text, at) or (1, text[at])
            at += length
            if is_prev_space:
                piece = piece.lstrip(" ")
            if piece:
                out.append(piece)
                is_prev_space = self._remove_extra_whitespaces and piece.endswith(" ")
        return "".join(out)

    def _finish(self, replaced: str) -> str:
        """Steps 3 and 4 and the trailing spaces, on the replaced text."""
        if self._remove_extra_whitespaces and not replaced:
            return ""  # SentencePiece's dummy prefix alone is trailing whitespace, dropped
        if self._add_dummy_prefix:
            replaced = " " + replaced
        escaped = replaced.replace(" ", SPACE_SYMBOL)
        return escaped.rstrip(SPACE_SYMBOL) if self._remove_extra_whitespaces else escaped
