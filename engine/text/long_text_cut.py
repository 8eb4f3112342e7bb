"""Texts far past the model's limit, cut before they are tokenized, exactly as the tokenizer would cut them.

A tokenizer reads the whole of a text before its truncation drops all but the first tokens: a
text of 200,000 characters costs a thousand times one of 200 though the model reads the same
256 tokens of both. So a text longer than CUT_CHARS_PER_TOKEN characters per token of the
limit is cut first, just before a whitespace character that follows a non-whitespace one.

That cut changes nothing of what the model reads where the tokenizer's pre-tokenizer splits the
text at whitespace (BERT's, whitespace splitting, byte-level BPE with its regex, SentencePiece's
Metaspace that splits, GPT-style Split patterns): no token then spans the cut, the normalizers
work character by character, so the tokens before the cut are those of the whole text. The cut
text must still reach the limit, so it is tokenized first: where it gives fewer tokens than the
limit (a text of few, very long words), the whole text is tokenized instead. A tokenizer whose
pre-tokenizer is not known to split at whitespace never has its texts cut.
"""

from __future__ import annotations

import json
import re

# A token of English prose is about four characters; a cut at eight per token of the limit
# leaves room for long words, and the check below catches texts that need more.
CUT_CHARS_PER_TOKEN = 8
_SPLITS_AT_WHITESPACE = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit"}
# A space: every pre-tokenizer above splits there. Other characters Python counts as whitespace
# are not split points to all of them: BERT's normaliser deletes the control characters among
# them (joining the words on either side) and Metaspace splits at spaces alone.
_BEFORE_SPACE = re.compile(r"\S( )")


def splits_at_whitespace(tokenizer_json: str) -> bool:
    """Whether the tokenizer's pre-tokenizer (or one of a sequence of them) splits a text at whitespace."""
    pre = json.loads(tokenizer_json).get("pre_tokenizer")
    parts = pre.get("pretokenizers", []) if pre and pre.get("type") == "Sequence" else [pre]
    return any(_splits(part) for part in parts if part)


def _splits(pre: dict) -> bool:
    kind = pre.get("type")
    if kind in _SPLITS_AT_WHITESPACE:
        return True
    if kind == "ByteLevel":
        return pre.get("use_regex", True)
    if kind == "Metaspace":
        return pre.get("split", True)
    if kind == "Split":  # GPT-2's, cl100k's, Qwen's and Llama 3's patterns end whitespace runs this way
        pattern = pre.get("pattern", {})
        return r"\s+(?!\S)" in (pattern.get("Regex") or "")
    return False


def cut_point(text: str, max_chars: int) -> int | None:
    """Where to cut `text` within its first `max_chars` characters: just before a space that follows a
    non-whitespace character, as late as possible; None where there is none."""
    positions = [match.start(1) for match in _BEFORE_SPACE.finditer(text, 0, max_chars + 1)]
    return positions[-1] if positions else None
