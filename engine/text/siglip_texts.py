"""Texts to token ids as transformers' SiglipTokenizer (SigLIP's original tokenizer: spiece.model, no
tokenizer.json; engine/model_files/siglip_tokenizer.py reads its files) gives them, step for step:

1. the text gets a leading "▁", any "▁" in it becoming a space (SiglipTokenizer.tokenize);
2. it is split at the special tokens ("</s>", "<unk>", ...), each kept as one token (transformers' trie);
3. each other part is canonicalized as SigLIP was trained (canonicalize_text, in Python here, since the
   tokenizers library's normalizers do not lowercase as str.lower does, e.g. a final capital sigma):
   lowercased where do_lower_case, string.punctuation's characters removed, runs of whitespace made one
   space, stripped;
4. SentencePiece encodes unk_token followed by the part and the pieces of unk_token alone are dropped,
   which is how the class encodes a part without the dummy prefix (engine/model_files/spm_tokenizer.py's
   segmenter encodes as SentencePiece does);
5. a leading "▁" token directly followed by a special token is dropped; the ids are cut to leave room for
   the end token, which is appended unless they already end with it (truncation=True, max_length).
Every step is the class's own, in Python or in a tokenizer built to encode as SentencePiece does, so ids
are the reference's exactly, not a conversion's approximation of them.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer

from rose_embed.engine.model_files.json_files import read_json_object
from rose_embed.engine.model_files.siglip_tokenizer import SiglipTokenizerFiles, read_siglip_tokenizer
from rose_embed.engine.model_files.spm_proto import SPACE_SYMBOL
from rose_embed.engine.model_files.spm_tokenizer import segmenter, vocabulary
from rose_embed.engine.text.spm_normalizer import SentencePieceNormalizer

_NO_PUNCTUATION = str.maketrans("", "", string.punctuation)
_WHITESPACE = re.compile(r"\s+")


def canonicalize(text: str, lowercase: bool) -> str:
    """SiglipTokenizer.canonicalize_text: what SigLIP's texts looked like in training."""
    if lowercase:
        text = text.lower()
    return _WHITESPACE.sub(" ", text.translate(_NO_PUNCTUATION)).strip()


class SiglipTexts:
    """SiglipTokenizer's ids for texts (module docstring); safe to call from several threads at once."""

    def __init__(self, files: SiglipTokenizerFiles):
        self._normalizer = SentencePieceNormalizer(files.model)
        self._segmenter = segmenter(files.model)
        # The model's pieces as spelled and its special tokens: ids back to strings and text.
        self.vocabulary: Tokenizer = vocabulary(files.model, list(files.special_tokens))
        self.eos_id = files.eos_id
        self._special_tokens = files.special_tokens
        # Special tokens are "<...>" with no other "<" or ">" (engine/model_files/siglip_tokenizer.py): no two
        # matches overlap, so the leftmost ones are the trie's.
        self._split = re.compile("|".join(map(re.escape, files.special_tokens)))
        self._lowercase = files.do_lower_case
        self._unk_token = files.unk_token
        self._unk_length = len(self._sentencepiece([files.unk_token])[0])
        space = next((i for i, p in enumerate(files.model.pieces) if p.piece == SPACE_SYMBOL), None)
        self._space_only = [space] if space is not None else None

    @classmethod
    def from_model_dir(cls, model_dir: Path) -> SiglipTexts:
        return cls(read_siglip_tokenizer(model_dir, read_json_object(model_dir / "tokenizer_config.json") or {}))

    def encode(self, texts: Sequence[str], max_length: int | None, add_special_tokens: bool = True) -> list[list[int]]:
        """Each text's ids; with `max_length`, cut to it, the end token kept (truncation=True)."""
        parts = [self._parts(text) for text in texts]
        encoded = iter(self._sentencepiece(
            [self._unk_token + part for text_parts in parts for part in text_parts if isinstance(part, str)]))
        result = []
        for text_parts in parts:
            runs = [[part] if isinstance(part, int) else self._after_unk(next(encoded)) for part in text_parts]
            if len(runs) > 1 and runs[0] == self._space_only and isinstance(text_parts[1], int):
                runs = runs[1:]  # SiglipTokenizer.tokenize: a lone "▁" before a special token goes
            ids = [i for run in runs for i in run]
            if add_special_tokens:
                ids = self._ended(ids, max_length)
            elif max_length is not None:
                ids = ids[:max_length]
            result.append(ids)
        return result

    def _sentencepiece(self, texts: list[str]) -> list[list[int]]:
        """SentencePieceProcessor.encode's ids for each text."""
        normalized = [self._normalizer.normalize(text) for text in texts]
        return [encoding.ids for encoding in self._segmenter.encode_batch(normalized, add_special_tokens=False)]

    def _parts(self, text: str) -> list[str | int]:
        """The text's canonicalized parts (strings) and special tokens (ids) in order; empty parts left out."""
        text = SPACE_SYMBOL + text.replace(SPACE_SYMBOL, " ")
        parts, at = [], 0
        for match in self._split.finditer(text):
            parts += self._canonical(text[at: match.start()])
            parts.append(self._special_tokens[match.group()])
            at = match.end()
        return parts + self._canonical(text[at:])

    def _canonical(self, part: str) -> list[str]:
        # A part canonicalized to nothing gives no pieces: unk_token's own are all dropped.
        canonical = canonicalize(part, self._lowercase)
        return [canonical] if canonical else []

    def _after_unk(self, ids: list[int]) -> list[int]:
        """A part's ids from those of unk_token + part (SiglipTokenizer._tokenize)."""
        return ids[self._unk_length:] if len(ids) >= self._unk_length else ids

    def _ended(self, ids: list[int], max_length: int | None) -> list[int]:
        """transformers' truncation (room for the one token build_inputs_with_special_tokens adds) and its
        end token, which is not added again after one the text already ends with."""
        if max_length is not None and len(ids) + 1 > max_length:
            ids = ids[: max_length - 1]
        return ids if ids and ids[-1] == self.eos_id else [*ids, self.eos_id]
