"""Text -> token ids, truncated to the model's limit the way sentence-transformers does it."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tokenizers import Tokenizer, normalizers
from tokenizers.processors import TemplateProcessing

from rose_embed.engine.text.long_text_cut import CUT_CHARS_PER_TOKEN, cut_point, splits_at_whitespace
from rose_embed.engine.model_files.clip import HIGHEST_ID, TextPadding
from rose_embed.engine.model_files.json_files import read_json_object
from rose_embed.engine.model_files.tokenizer_file import read_tokenizer
from rose_embed.engine.text.ascii_wordpiece import AsciiWordPiece
from rose_embed.engine.text.siglip_texts import SiglipTexts
from rose_embed.engine.contract.batch import PackedBatch, pack_flat, split_flat

if TYPE_CHECKING:  # the loader imports torch, which a tokenizer process does without
    from rose_embed.engine.model_files.loader import ModelSpec

# The token Qwen3-Embedding's own tokenizer.json appends (its TemplateProcessing
# post-processor: "$A <|endoftext|>"); note it is not the chat eos <|im_end|>.
_QWEN_END_TOKEN = "<|endoftext|>"
# Below this many texts the fast path goes text by text: its whole-list form costs a few dozen
# array operations, more than a few texts' own tokenizing.
_FEW_TEXTS = 16


def _end_token(model_dir: Path, tokenizer: Tokenizer) -> str:
    """<|endoftext|> where the vocabulary has it, else tokenizer_config.json's eos_token."""
    if tokenizer.token_to_id(_QWEN_END_TOKEN) is not None:
        return _QWEN_END_TOKEN
    eos = (read_json_object(model_dir / "tokenizer_config.json") or {}).get("eos_token")
    if isinstance(eos, dict):  # {"content": "</s>", ...} in older files
        eos = eos.get("content")
    if not eos or tokenizer.token_to_id(eos) is None:
        raise ValueError("last-token pooling needs an end token, and the tokenizer defines none")
    return eos


def ensure_end_token(model_dir: Path, tokenizer: Tokenizer) -> None:
    """Make the tokenizer end every text with the end token, the way Qwen3-Embedding's
    tokenizer.json does, unless its post-processor already appends a special token.

    Installing a post-processor (rather than appending ids afterwards) keeps truncation
    right: the fast tokenizer reserves room for the added token when it truncates. What a
    template post-processor already adds stays (a Llama / Mistral tokenizer's leading <s>).
    """
    probe = "end token probe"
    with_special = tokenizer.encode(probe, add_special_tokens=True)
    if len(with_special.ids) > len(tokenizer.encode(probe, add_special_tokens=False).ids) and with_special.special_tokens_mask[-1]:
        return
    token = _end_token(model_dir, tokenizer)
    single, specials = "$A:0", {token: tokenizer.token_to_id(token)}
    current = json.loads(tokenizer.to_str()).get("post_processor") or {}
    if current.get("type") == "TemplateProcessing":
        single = " ".join(_template_piece(piece) for piece in current["single"])
        specials.update({name: spec["ids"][0] for name, spec in current["special_tokens"].items() if len(spec["ids"]) == 1})
    tokenizer.post_processor = TemplateProcessing(
        single=f"{single} {token}:0", pair=f"$A:0 {token}:0 $B:1 {token}:1", special_tokens=list(specials.items()),
    )


def _template_piece(piece: dict) -> str:
    """One item of a serialised TemplateProcessing template, back in its string form."""
    if "SpecialToken" in piece:
        return f"{piece['SpecialToken']['id']}:{piece['SpecialToken']['type_id']}"
    return f"${piece['Sequence']['id']}:{piece['Sequence']['type_id']}"


def lowercase_first(tokenizer: Tokenizer) -> None:
    """Lowercase texts before the tokenizer's own normaliser, as sentence-transformers does for a
    Transformer module with do_lower_case, unless a Lowercase normaliser is already there."""
    current = tokenizer.normalizer
    steps = list(current) if isinstance(current, normalizers.Sequence) else [current] if current else []
    if any(isinstance(step, normalizers.Lowercase) for step in steps):
        return
    tokenizer.normalizer = normalizers.Sequence([normalizers.Lowercase(), *steps])


class TextTokenizer:
    """A fast (Rust) tokenizer configured for embedding: truncation on, padding off.

    `encode` is safe to call from several threads at once; the Rust batch encoder
    releases the GIL and spreads one batch over the machine's cores.
    """

    def __init__(self, model_dir: Path, max_seq_len: int, append_end_token: bool = False, strip_texts: bool = True,
                 lowercase: bool = False, pooled_token: int | None = None, padding: TextPadding | None = None,
                 siglip_tokenizer: bool = False):
        # What builds the same tokenizer again, in another process.
        self.recipe = (Path(model_dir), max_seq_len, append_end_token, strip_texts, lowercase, pooled_token, padding,
                       siglip_tokenizer)
        self.max_seq_len = max_seq_len
        # A CLIP text tower's token whose state is the text's vector (engine/model_files/clip.py): ids end there.
        self.pooled_token = pooled_token
        # Pad ids a SigLIP text tower attends to (engine/model_files/siglip.py): ids are padded to max_seq_len.
        self.padding = padding
        self.strip_texts = strip_texts
        # SiglipTokenizer's texts (no tokenizer.json: spiece.model) take its own steps to ids; its pieces and
        # special tokens, as a fast tokenizer, give ids back as strings.
        self._siglip = SiglipTexts.from_model_dir(Path(model_dir)) if siglip_tokenizer else None
        self._tokenizer = (self._siglip.vocabulary if self._siglip is not None
                           else read_tokenizer(Path(model_dir) / "tokenizer.json"))
        if lowercase:
            lowercase_first(self._tokenizer)
        if append_end_token:
            ensure_end_token(model_dir, self._tokenizer)
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=max_seq_len)
        self.vocab_size = self._tokenizer.get_vocab_size(with_added_tokens=True)
        # Skipping offsets makes batch encoding noticeably faster where available.
        self._encode_batch = getattr(
            self._tokenizer, "encode_batch_fast", self._tokenizer.encode_batch
        )
        # Texts longer than this are cut before they are tokenized (engine/text/long_text_cut.py).
        # (Not for padded texts: every one reaches the limit, so a cut could not be checked.)
        self._cut_chars = (CUT_CHARS_PER_TOKEN * max_seq_len
                           if padding is None and splits_at_whitespace(self._tokenizer.to_str()) else None)
        self._untruncated: Tokenizer | None = None  # built on first use: only over-long texts need it
        self._untruncated_lock = threading.Lock()
        self._wrapping: tuple[tuple[int, ...], tuple[int, ...]] | None = None
        plain = pooled_token is None and padding is None and self._siglip is None
        self._fast = self._ascii_wordpiece() if plain else None

    def _ascii_wordpiece(self) -> AsciiWordPiece | None:
        try:
            prefix, suffix = self.wrapping()
        except ValueError:
            return None
        return AsciiWordPiece.for_tokenizer(self._tokenizer, prefix, suffix, self.max_seq_len)

    @property
    def holds_the_gil(self) -> bool:
        """Whether encoding runs in Python (the ASCII fast path; SiglipTokenizer's canonicalization and
        SentencePiece normalization, about half its time): a thread then buys little parallelism."""
        return self._fast is not None or self._siglip is not None

    def encode(self, texts: list[str]) -> list[np.ndarray]:
        """Token ids (int32) per text, special tokens added, truncated to max_seq_len.

        Texts are stripped first, as sentence-transformers (before v5) does before tokenizing,
        unless `strip_texts` is off: byte-level BPE tokenizers (Qwen) keep whitespace as
        tokens, and today's references (sentence-transformers >= 5, Qwen's own code) feed
        the text as it is.
        """
        texts = self._cut_long(texts)
        whole = self._whole_list(texts)
        if whole is not None:
            flat, lengths = whole
            return split_flat(flat, lengths)
        return [np.asarray(ids, dtype=np.int32) for ids in self._ids(texts)]

    def _cut_long(self, texts: Sequence[str]) -> Sequence[str]:
        """The texts, those far past the limit cut where it changes nothing (engine/text/long_text_cut.py)."""
        limit = self._cut_chars
        if limit is None or all(len(text) <= limit for text in texts):
            return texts
        cuts = {}
        for i, text in enumerate(texts):
            if len(text) > limit and (at := cut_point(text, limit)) is not None:
                cuts[i] = text[:at]
        texts = list(texts)
        for (i, cut), ids in zip(cuts.items(), self._ids(list(cuts.values()))):
            if len(ids) >= self.max_seq_len:  # the cut text still reaches the limit
                texts[i] = cut
        return texts

    def encode_packed(self, texts: Sequence[str]) -> PackedBatch:
        """The texts' ids as one packed stream, what `pack(encode(texts))` gives.

        Built without an array per text: from the fast path's whole-list form where it
        applies, else straight from the id lists the tokenizer hands out, in one pass.
        Raises ValueError for a text that gives no token at all.
        """
        return pack_flat(*self.encode_flat(texts))

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """What `encode` gives as one array of every text's ids (int32) and the texts' lengths."""
        texts = self._cut_long(texts)
        whole = self._whole_list(texts)
        if whole is not None:
            return whole
        ids = self._ids(texts)
        lengths = np.fromiter(map(len, ids), dtype=np.int32, count=len(ids))
        return np.fromiter(chain.from_iterable(ids), dtype=np.int32, count=int(lengths.sum())), lengths

    def _whole_list(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray] | None:
        """The fast path's whole-list form, (flat ids, lengths), where it applies; else None."""
        if self._fast is None or len(texts) < _FEW_TEXTS:
            return None
        return self._fast.encode_packed(self._stripped(texts), self._rust_ids)

    def _stripped(self, texts: Sequence[str]) -> Sequence[str]:
        return [t.strip() for t in texts] if self.strip_texts else texts

    def _rust_ids(self, texts: list[str]) -> list[list[int]]:
        if self._siglip is not None:
            return self._siglip.encode(texts, self.max_seq_len)
        return [e.ids for e in self._encode_batch(texts, add_special_tokens=True)]

    def _ids(self, texts: Sequence[str]) -> list[Sequence[int]]:
        texts = self._stripped(texts)
        if self.pooled_token is not None:
            return [cut_after_pooled_token(ids, self.pooled_token) for ids in self._rust_ids(texts)]
        if self.padding is not None:
            return [padded(ids, self.padding, self.max_seq_len) for ids in self._rust_ids(texts)]
        if self._fast is None:
            return self._rust_ids(texts)
        ids = [self._fast.encode(text) for text in texts]
        rest = [i for i, one in enumerate(ids) if one is None]
        if rest:
            for i, rust_ids in zip(rest, self._rust_ids([texts[i] for i in rest])):
                ids[i] = rust_ids
        return ids

    def encode_untruncated(self, texts: list[str], add_special_tokens: bool = True) -> list[list[int]]:
        """Token ids per text without the length limit, stripped (or not) as `encode` strips them."""
        if self._siglip is not None:
            return self._siglip.encode([t.strip() for t in texts] if self.strip_texts else texts, None,
                                       add_special_tokens)
        with self._untruncated_lock:
            if self._untruncated is None:
                # A copy, not the shared tokenizer reconfigured: other threads encode with it meanwhile.
                untruncated = Tokenizer.from_str(self._tokenizer.to_str())
                untruncated.no_truncation()
                self._untruncated = untruncated
        if self.strip_texts:
            texts = [t.strip() for t in texts]
        return [e.ids for e in self._untruncated.encode_batch(texts, add_special_tokens=add_special_tokens)]

    def wrapping(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The special tokens the tokenizer puts before and after one text's own tokens
        (BERT: ([CLS],), ([SEP],); Qwen3-Embedding: (), (<|endoftext|>,)), read from its
        post-processor by encoding a probe. ValueError where the text's tokens do not come
        out as one run between them."""
        if self._wrapping is None:
            probe = "a probe of the special tokens"
            bare, wrapped = (self.encode_untruncated([probe], add)[0] for add in (False, True))
            starts = [i for i in range(len(wrapped) - len(bare) + 1) if wrapped[i: i + len(bare)] == bare]
            if not bare or not starts:
                raise ValueError("the tokenizer's post-processor does not keep a text's tokens in one run, "
                                 "so its windows cannot be wrapped as a text is")
            self._wrapping = tuple(wrapped[: starts[0]]), tuple(wrapped[starts[0] + len(bare):])
        return self._wrapping

    def truncate_ids(self, ids: list[int]) -> np.ndarray:
        """Caller-given token ids, used as they are and cut to max_seq_len. Ids that end with what the
        tokenizer puts after a text ([SEP], </s>, <|endoftext|>) keep it at the end of the cut, as the
        tokenizer's own truncation of a text does: a last-token-pooled model reads its vector there."""
        if self.pooled_token is not None:
            ids = cut_after_pooled_token(ids, self.pooled_token)
        if self.padding is not None and len(ids) < self.max_seq_len:
            ids = padded(ids, self.padding, self.max_seq_len)
        if len(ids) <= self.max_seq_len:
            return np.asarray(ids, dtype=np.int32)
        try:
            after = self.wrapping()[1]
        except ValueError:  # no text-shaped wrapping to keep: cut as sent
            after = ()
        if after and len(after) < self.max_seq_len and tuple(ids[len(ids) - len(after):]) == after:
            return np.asarray([*ids[: self.max_seq_len - len(after)], *after], dtype=np.int32)
        return np.asarray(ids[: self.max_seq_len], dtype=np.int32)

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def decode_releasing_gil(self, ids: list[int]) -> str:
        """`decode(ids, skip_special_tokens=False)` for a worker thread: the tokenizers library
        releases the GIL in `decode_batch` but not in `decode`, so only this one lets the
        caller's other threads run while millions of ids are decoded."""
        return self._tokenizer.decode_batch([ids], skip_special_tokens=False)[0]

    def token_strings(self, ids: list[int]) -> list[str]:
        """Each id's token as the vocabulary spells it ("##ing", "Ġthe")."""
        return [self._tokenizer.id_to_token(i) or "" for i in ids]


def cut_after_pooled_token(ids: Sequence[int], pooled_token: int) -> Sequence[int]:
    """A CLIP text's ids up to the token transformers reads its vector at: the first `pooled_token`, or
    with HIGHEST_ID the first occurrence of the text's highest id; the first token where there is no
    such token (transformers' argmax of an all-false row). The text tower is causal, so that token's
    state is the same without what follows, and the text is pooled at its last token."""
    if not ids:
        return ids
    if pooled_token == HIGHEST_ID:
        at = max(range(len(ids)), key=ids.__getitem__)  # the first of the highest, as argmax takes it
    else:
        try:
            at = list(ids).index(pooled_token)
        except ValueError:
            at = 0
    return ids[: at + 1]


def padded(ids: Sequence[int], padding: TextPadding, length: int) -> list[int]:
    """A text's ids padded to `length` with the pad id on the padding's side, as transformers' tokenizer
    pads with padding="max_length"; ids as long already are kept."""
    pads = [padding.pad_id] * (length - len(ids))
    return [*pads, *ids] if padding.side == "left" else [*ids, *pads]


# Model types whose tokenizers split on whitespace (WordPiece), where stripping a text changes
# nothing a reference computes. For byte-level BPE (RoBERTa, XLM-R's SentencePiece, Qwen3,
# ModernBERT, Gemma3, Mistral) whitespace is content, and sentence-transformers 6 feeds the
# text as it is.
_STRIPPED_MODEL_TYPES = {"bert", "distilbert", "mpnet"}


def tokenizer_recipe(spec: ModelSpec) -> tuple:
    """TextTokenizer's arguments for the model (its `recipe`), without loading the tokenizer."""
    strip_texts = spec.hf_config.get("model_type") in _STRIPPED_MODEL_TYPES
    pooled_token = spec.clip.end_token if spec.clip is not None else None
    padding = spec.clip.text_padding if spec.clip is not None else None
    siglip_tokenizer = spec.clip is not None and spec.clip.siglip_tokenizer
    return (Path(spec.path), spec.max_seq_len, spec.append_end_token, strip_texts, spec.lowercase, pooled_token,
            padding, siglip_tokenizer)


def tokenizer_for(spec: ModelSpec) -> TextTokenizer:
    return TextTokenizer(*tokenizer_recipe(spec))


def vocab_size_of(tokenizer: TextTokenizer, spec: ModelSpec) -> int:
    """Token ids below this are valid input (the embedding table may be larger than the tokenizer)."""
    return max(tokenizer.vocab_size, int(spec.hf_config.get("vocab_size", 0)))
