"""The files of SigLIP's original tokenizer, transformers' SiglipTokenizer (tokenizer_config.json
tokenizer_class "SiglipTokenizer"): spiece.model, a SentencePiece unigram model, and tokenizer_config.json
for its special tokens and do_lower_case. There is no tokenizer.json; engine/text/siglip_texts.py encodes
texts as the class does from what is read here.

The special tokens are what transformers splits a text at before tokenizing the rest: the named ones
(eos_token, unk_token, pad_token, ... with SiglipTokenizer's defaults "</s>", "<unk>", "</s>"), the extra
ones and those of added_tokens_decoder. Each must be a piece of spiece.model (or carry its id in
added_tokens_decoder), and each must be spelled "<...>" with no other "<" or ">", as SentencePiece's
are: then a text is split at them as transformers' trie splits it, whatever their lstrip / rstrip (each
part is stripped by the class's canonicalization anyway); others are refused by name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from rose_embed.engine.model_files.clip import ClipError
from rose_embed.engine.model_files.spm_proto import SentencePieceModel, read_sentencepiece_model
from rose_embed.engine.model_files.spm_tokenizer import sentencepiece_refusal

SIGLIP_TOKENIZER_CLASS = "SiglipTokenizer"
SPIECE_FILE = "spiece.model"
# transformers' named special tokens, with SiglipTokenizer's defaults where it has one.
_NAMED_DEFAULTS = {"bos_token": None, "eos_token": "</s>", "unk_token": "<unk>", "sep_token": None,
                   "pad_token": "</s>", "cls_token": None, "mask_token": None}
_SPECIAL_SPELLING = re.compile(r"<[^<>]+>")


@dataclass(frozen=True)
class SiglipTokenizerFiles:
    model: SentencePieceModel
    special_tokens: dict[str, int]  # token -> id: where a text is split, each kept as one token
    eos_id: int  # ends every text
    pad_id: int
    unk_token: str  # the class encodes each part of a text after this token and drops that token's pieces
    do_lower_case: bool


def read_siglip_tokenizer(model_dir: Path, tok_cfg: dict) -> SiglipTokenizerFiles:
    """SiglipTokenizer's files in `model_dir` (tok_cfg is its tokenizer_config.json); ClipError where they
    cannot be followed exactly, ModelLoadError where spiece.model is broken."""
    if not (model_dir / SPIECE_FILE).is_file():
        raise ClipError(f"SigLIP's SentencePiece tokenizer (SiglipTokenizer) needs {SPIECE_FILE}, and there is none")
    model = read_sentencepiece_model(model_dir / SPIECE_FILE)
    if refusal := sentencepiece_refusal(model):
        raise ClipError(f"{SPIECE_FILE}: {refusal}")
    piece_ids = {piece.piece: i for i, piece in enumerate(model.pieces)}
    added = _added_tokens(tok_cfg)
    named = {name: _content(tok_cfg.get(name, default)) for name, default in _NAMED_DEFAULTS.items()}
    extra = tok_cfg.get("extra_special_tokens") or tok_cfg.get("additional_special_tokens") or []
    extra = list(extra.values()) if isinstance(extra, dict) else list(extra)
    special_tokens = {}
    for token in [*added, *(t for t in named.values() if t), *map(_content, extra)]:
        if not isinstance(token, str) or not _SPECIAL_SPELLING.fullmatch(token):
            raise ClipError(f"a SiglipTokenizer special token {token!r} is not supported (tokens spelled "
                            "'<...>', as SentencePiece's are, are)")
        token_id = added.get(token, piece_ids.get(token))
        if token_id is None:
            raise ClipError(f"the SiglipTokenizer special token {token!r} is not a piece of {SPIECE_FILE}")
        special_tokens[token] = token_id
    for name in ("eos_token", "unk_token", "pad_token"):
        if not named[name]:
            raise ClipError(f"a SiglipTokenizer without a {name} is not supported")
    return SiglipTokenizerFiles(
        model=model, special_tokens=special_tokens, eos_id=special_tokens[named["eos_token"]],
        pad_id=special_tokens[named["pad_token"]], unk_token=named["unk_token"],
        do_lower_case=bool(tok_cfg.get("do_lower_case", True)),
    )


def _added_tokens(tok_cfg: dict) -> dict[str, int]:
    added = {}
    for token_id, token in (tok_cfg.get("added_tokens_decoder") or {}).items():
        if isinstance(token, dict) and token.get("single_word"):
            raise ClipError(f"a SiglipTokenizer added token with single_word ({token.get('content')!r}) is not "
                            "supported")
        added[_content(token)] = int(token_id)
    return added


def _content(token):
    """A token as tokenizer_config.json spells it: a string, or {"content": ...} in files written by
    some transformers versions."""
    return token.get("content") if isinstance(token, dict) else token
