"""Whether a checkpoint is a multi-vector (ColBERT) model saved by PyLate, and how it tokenizes, from its files.

A `pylate.models.ColBERT` save is a sentence-transformers folder, modules.json [Transformer, Dense...],
whose config_sentence_transformers.json carries PyLate's keys (model_type "ColBERT", query_prefix,
document_prefix, query_length, document_length, attend_to_expansion_tokens, skiplist_words,
do_query_expansion). What `ColBERT.encode` computes from them (pylate/models/colbert.py: `tokenize`,
`encode`, `skiplist_mask`), which the engine computes exactly:

  tokens     the text cut to `length - 1` tokens, specials included; the prefix token ([Q] / [D]) put
             after the first one (`insert_prefix_token`), so at most `length` tokens
  queries    with do_query_expansion, padded with [MASK] (the tokenizer's mask token, else its end
             token) to query_length, every token kept
  expansion  attend_to_expansion_tokens true: the [MASK]s are tokens like the others. False (PyLate's
             default): the attention mask handed to the transformer is 0 on them (the tokenizer's
             padding mask, which PyLate leaves as it is), so no token, [MASK] included, reads a [MASK]
             as a key, while each [MASK] reads the query's own tokens and gives its vector. The
             tokenizer marks them as hidden keys (engine/contract/hidden_keys.py) and the engine's
             attention sees each query's own tokens alone as keys
  documents  every token kept but those of skiplist_words (punctuation by default)
  vectors    the Dense modules (a projection without bias) on each kept token's state, then L2 normalised

The keys' defaults are PyLate's when a key is absent. Refused by name: a prefix token the tokenizer
lacks (PyLate would add it with freshly initialised weights), modules other than Transformer and
Dense, a length past the model's positions; the engine refuses hidden [MASK]s where its attention
cannot hide keys (engine/rose/engine.py: on a GPU, every backend but sdpa).
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

from rose_embed.engine.model_files.json_files import read_json, read_json_object
from rose_embed.engine.model_files.st_modules import Dense, ModuleEntry, dense_module, transformer_settings

# The keys PyLate's ColBERT.save writes into config_sentence_transformers.json.
PYLATE_KEYS = ("query_prefix", "document_prefix", "query_length", "document_length", "attend_to_expansion_tokens",
               "skiplist_words", "do_query_expansion")
# PyLate's defaults for a key its config lacks (ColBERT.__init__).
_DEFAULTS = {"query_prefix": "[Q] ", "document_prefix": "[D] ", "query_length": 32, "document_length": 180,
             "attend_to_expansion_tokens": False, "skiplist_words": list(string.punctuation),
             "do_query_expansion": True}


class ColbertError(ValueError):
    """A ColBERT checkpoint that the engine cannot compute exactly."""


@dataclass(frozen=True)
class ColbertModel:
    """How a PyLate ColBERT model turns a query or a document into token ids and which tokens it keeps."""

    query_prefix_id: int | None  # inserted after the first token; None: no prefix ("" in the config)
    document_prefix_id: int | None
    query_length: int  # a query's tokens, prefix included
    document_length: int  # a document's most tokens, prefix included
    expansion_id: int | None  # the [MASK] queries are padded with to query_length; None: no expansion
    hides_expansion: bool  # the [MASK]s are no keys of the attention (attend_to_expansion_tokens false)
    skiplist_ids: frozenset[int]  # token ids a document keeps no vector for
    dense: tuple[Dense, ...]  # the projection(s) applied to each kept token's state


def is_colbert(st_cfg: dict) -> bool:
    """A PyLate ColBERT save, by its config_sentence_transformers.json."""
    return st_cfg.get("model_type") == "ColBERT" or any(key in st_cfg for key in PYLATE_KEYS)


def _settings(st_cfg: dict) -> dict:
    settings = {key: st_cfg.get(key) if st_cfg.get(key) is not None else default for key, default in _DEFAULTS.items()}
    for key in ("query_length", "document_length"):
        value = settings[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 3:
            raise ColbertError(f"{key} must be an integer of at least 3; got {value!r}")
    for key in ("do_query_expansion", "attend_to_expansion_tokens"):
        if not isinstance(settings[key], bool):
            raise ColbertError(f"{key} must be true or false; got {settings[key]!r}")
    if not settings["do_query_expansion"]:
        settings["attend_to_expansion_tokens"] = False  # as ColBERT.__init__ sets it
    return settings


def _special_id(tokenizer, tok_cfg: dict, name: str) -> int | None:
    token = tok_cfg.get(name)
    if isinstance(token, dict):  # an AddedToken written out
        token = token.get("content")
    return tokenizer.token_to_id(token) if isinstance(token, str) else None


def _prefix_id(tokenizer, prefix: str, which: str) -> int | None:
    if prefix == "":
        return None
    token_id = tokenizer.token_to_id(prefix)
    if token_id is None:
        raise ColbertError(f"{which} {prefix!r} is not a token of tokenizer.json (PyLate would add it with freshly "
                           "initialised weights)")
    return token_id


def _skiplist_ids(tokenizer, words, unk_id: int | None) -> frozenset[int]:
    """convert_tokens_to_ids of each word: a word outside the vocabulary names the unknown token."""
    if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
        raise ColbertError(f"skiplist_words must be a list of strings; got {words!r}")
    ids = set()
    for word in words:
        token_id = tokenizer.token_to_id(word)
        if token_id is None:
            if unk_id is None:
                raise ColbertError(f"skiplist word {word!r} is not a token and the tokenizer has no unknown token")
            token_id = unk_id
        ids.add(token_id)
    return frozenset(ids)


def _modules(model_dir: Path, hidden_size: int) -> tuple[tuple[Dense, ...], int | None, bool]:
    entries = read_json(model_dir / "modules.json")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ColbertError("modules.json is not a list of modules")
    modules = [ModuleEntry(model_dir, entry, i) for i, entry in enumerate(entries)]
    # PyLate's own Dense (pylate.models.Dense.Dense) subclasses sentence-transformers' and saves the same files.
    names = [m.cls or m.type.rsplit(".", 1)[-1] for m in modules]
    if len(names) < 2 or names[0] != "Transformer" or any(name != "Dense" for name in names[1:]):
        raise ColbertError(f"a ColBERT model with modules {names} is not supported; only a Transformer followed by "
                           "Dense modules is")
    max_seq_length, lowercase = transformer_settings(modules[0])
    dense, dim = [], hidden_size
    for module in modules[1:]:
        step = dense_module(module, dim)
        dense.append(step)
        dim = step.out_features
    return tuple(dense), max_seq_length, lowercase


def read_colbert(model_dir: Path, st_cfg: dict, hidden_size: int, position_limit: int) -> tuple[ColbertModel, bool]:
    """(how the model tokenizes and projects, its Transformer's do_lower_case); ColbertError (or
    ModuleError) names what cannot be computed exactly. `position_limit`: the most tokens its positions take."""
    from rose_embed.engine.model_files.tokenizer_file import read_tokenizer

    settings = _settings(st_cfg)
    dense, _, lowercase = _modules(model_dir, hidden_size)
    longest = max(settings["query_length"], settings["document_length"])
    if longest > position_limit:
        raise ColbertError(f"query_length / document_length {longest} is past the model's {position_limit} positions")
    tokenizer = read_tokenizer(model_dir / "tokenizer.json")
    tok_cfg = read_json_object(model_dir / "tokenizer_config.json") or {}
    expansion_id = None
    if settings["do_query_expansion"]:
        # ColBERT.__init__ pads with the mask token, else the end token.
        expansion_id = _special_id(tokenizer, tok_cfg, "mask_token")
        if expansion_id is None:
            expansion_id = _special_id(tokenizer, tok_cfg, "eos_token")
        if expansion_id is None:
            raise ColbertError("query expansion needs a mask or end token, and tokenizer_config.json names neither")
    model = ColbertModel(
        query_prefix_id=_prefix_id(tokenizer, settings["query_prefix"], "query_prefix"),
        document_prefix_id=_prefix_id(tokenizer, settings["document_prefix"], "document_prefix"),
        query_length=settings["query_length"], document_length=settings["document_length"],
        expansion_id=expansion_id,
        hides_expansion=expansion_id is not None and not settings["attend_to_expansion_tokens"],
        skiplist_ids=_skiplist_ids(tokenizer, settings["skiplist_words"], _special_id(tokenizer, tok_cfg, "unk_token")),
        dense=dense,
    )
    return model, lowercase
