"""Fast (Rust) tokenizers built from a SentencePiece unigram model (engine/model_files/spm_proto.py), for
checkpoints that ship spiece.model and no tokenizer.json.

`segmenter` takes a text that SentencePiece's normalizer has normalized (engine/text/spm_normalizer.py)
and gives SentencePieceProcessor.encode's ids for it: the unigram model's best segmentation over the whole
text, an unknown character scored kUnkPenalty below the lowest normal piece and a run of unknown
characters one unknown token. SentencePiece never matches a control, unknown or unused piece against
text; the tokenizers library's Unigram matches every piece it holds. So in the segmenter those pieces are
spelled with a leading " ", which a normalized text never holds (its spaces are all "▁"), and carry the
lowest normal piece's score, so that the lowest score of all, which prices an unknown character, is the
normal pieces' as in SentencePiece. The segmenter's token strings are therefore not the vocabulary's:
`vocabulary` is the same model with its pieces as spelled, for ids back to strings and text.
Models that need more (BPE, user-defined or byte pieces, byte fallback, whitespace as a suffix, no
escaping) are refused by name.
"""

from __future__ import annotations

from tokenizers import AddedToken, Tokenizer, decoders
from tokenizers.models import Unigram

from rose_embed.engine.model_files.spm_proto import (
    BYTE, CONTROL, NORMAL, SPACE_SYMBOL, UNIGRAM, UNKNOWN, UNUSED, USER_DEFINED, SentencePieceModel,
)

_UNMATCHED_TYPES = (CONTROL, UNKNOWN, UNUSED)


def sentencepiece_refusal(model: SentencePieceModel) -> str | None:
    """Why the segmenter and the normalizer would not encode as SentencePiece does, or None."""
    if model.model_type != UNIGRAM:
        return f"a SentencePiece model of type {model.model_type} is not supported (unigram models, type 1, are)"
    if model.byte_fallback or any(piece.type == BYTE for piece in model.pieces):
        return "a SentencePiece model with byte fallback is not supported"
    if any(piece.type == USER_DEFINED for piece in model.pieces):
        return "a SentencePiece model with user-defined pieces is not supported"
    if model.treat_whitespace_as_suffix:
        return "a SentencePiece model that treats whitespace as a suffix is not supported"
    if not model.escape_whitespaces:
        return "a SentencePiece model that does not write spaces as '▁' is not supported"
    if not 0 <= model.unk_id < len(model.pieces) or model.pieces[model.unk_id].type != UNKNOWN:
        return f"the SentencePiece model's unk_id {model.unk_id} is not its unknown piece"
    if not any(piece.type == NORMAL for piece in model.pieces):
        return "the SentencePiece model has no normal pieces"
    return None


def segmenter(model: SentencePieceModel) -> Tokenizer:
    """A tokenizer whose ids for a normalized text are SentencePieceProcessor.encode's for the text (no
    special tokens, no truncation). The model must pass sentencepiece_refusal."""
    lowest = min(p.score for p in model.pieces if p.type == NORMAL)
    vocab = [(f" {p.piece}", lowest) if p.type in _UNMATCHED_TYPES else (p.piece, p.score) for p in model.pieces]
    return Tokenizer(Unigram(vocab, unk_id=model.unk_id, byte_fallback=False))


def vocabulary(model: SentencePieceModel, special_tokens: list[str]) -> Tokenizer:
    """The model's pieces as spelled, with `special_tokens` (pieces of the model) marked special: for
    ids back to token strings and text. It does not encode texts as SentencePiece does."""
    tokenizer = Tokenizer(Unigram([(p.piece, p.score) for p in model.pieces], unk_id=model.unk_id,
                                  byte_fallback=False))
    tokenizer.add_special_tokens([AddedToken(token, normalized=False, special=True) for token in special_tokens])
    tokenizer.decoder = decoders.Metaspace(replacement=SPACE_SYMBOL, prepend_scheme="always", split=True)
    return tokenizer
