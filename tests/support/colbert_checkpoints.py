"""Tiny random PyLate ColBERT checkpoints, and PyLate's vectors and MaxSim scores transcribed as the reference.

PyLate cannot be installed beside this test environment (it pins older sentence-transformers and
transformers), so `save_colbert` writes its files the way `pylate.models.ColBERT.save` does:
the prefix tokens "[Q] " and "[D] " added to the tokenizer and the embeddings resized to them (as
ColBERT.__init__ does), `SentenceTransformer(modules=[Transformer, Dense(bias=False, Identity)])`
saved by sentence-transformers itself, and PyLate's keys written into config_sentence_transformers.json.

`reference_vectors` runs sentence-transformers' own Transformer and Dense on the tokens PyLate builds,
transcribed from pylate/models/colbert.py (lightonai/pylate): `ColBERT.tokenize` (cut to length - 1,
`insert_prefix_token` after the first token, queries padded with the mask token to query_length,
the attention mask filled with 1 for attend_to_expansion_tokens) and `ColBERT.encode` (documents keep
the tokens that are attended and not in the skiplist, `skiplist_mask`; expanded queries keep every
token; each kept vector L2 normalised). `maxsim` is pylate/scores/colbert.py's `colbert_scores`:
einsum of every query token with every document token, the max over the document's tokens, summed.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

import numpy as np
import torch

from tests.support.qwen3_checkpoints import randomize
from tests.support.st_checkpoints import bert_tokenizer

PROJECTION_DIM = 16
GPU_QUERY_LENGTH = 16  # the GPU tests' ColBERT (tests/gpu/conftest.py): its MaxSim sums this many tokens


def save_colbert(path: Path, *, query_length: int = 12, document_length: int = 40, attend_to_expansion_tokens=True,
                 do_query_expansion: bool = True, seed: int = 0, **pylate_keys) -> Path:
    """A random tiny BERT ColBERT saved as PyLate saves one; `pylate_keys` override or add config keys."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Transformer
    from transformers import AutoModel, AutoTokenizer, BertConfig

    hf_dir = path.parent / f"{path.name}-hf"
    hf_dir.mkdir(parents=True, exist_ok=True)
    bert_tokenizer(hf_dir)
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    tokenizer.add_tokens(["[Q] ", "[D] "])
    tokenizer.save_pretrained(hf_dir)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, max_position_embeddings=512)
    torch.manual_seed(seed)
    model = AutoModel.from_config(config)
    randomize(model, seed)
    model.save_pretrained(hf_dir)
    transformer = Transformer(str(hf_dir), max_seq_length=document_length - 1)
    dense = Dense(transformer.get_embedding_dimension(), PROJECTION_DIM, bias=False,
                  activation_function=torch.nn.Identity())
    SentenceTransformer(modules=[transformer, dense], device="cpu").save(str(path))
    cfg_path = path / "config_sentence_transformers.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.update(model_type="ColBERT", similarity_fn_name="MaxSim", query_prefix="[Q] ", document_prefix="[D] ",
               query_length=query_length, document_length=document_length,
               attend_to_expansion_tokens=attend_to_expansion_tokens, skiplist_words=list(string.punctuation),
               do_query_expansion=do_query_expansion)
    cfg.update(pylate_keys)
    cfg_path.write_text(json.dumps(cfg, indent=2))
    return path


def reference_vectors(path: Path, texts: list[str], is_query: bool, device: str = "cpu",
                      dtype: torch.dtype = torch.float32) -> list[np.ndarray]:
    """Each text's kept token vectors [n, dim] float32, as ColBERT(path).encode(texts, is_query=...) gives them
    (on `device`, the modules in `dtype`)."""
    from sentence_transformers.sentence_transformer.modules import Dense, Transformer

    cfg = json.loads((path / "config_sentence_transformers.json").read_text())
    # The modules as PyLate's _load_sbert_model loads them (SentenceTransformer(path) would add a Pooling).
    transformer, dense = Transformer.load(str(path)), Dense.load(str(path / "1_Dense"))
    transformer.to(device=device, dtype=dtype)
    dense.to(device=device, dtype=dtype)
    tokenizer = transformer.tokenizer
    length = cfg["query_length"] if is_query else cfg["document_length"]
    prefix_id = tokenizer.convert_tokens_to_ids(cfg["query_prefix"] if is_query else cfg["document_prefix"])
    skiplist = [tokenizer.convert_tokens_to_ids(word) for word in cfg["skiplist_words"]]
    expand = is_query and cfg["do_query_expansion"]
    transformer.max_seq_length = length - 1  # ColBERT.tokenize, with a prefix
    out = []
    for text in texts:
        features = transformer.tokenize([text])
        ids, attention = features["input_ids"], features["attention_mask"]
        if expand:  # padding="max_length", pad_token_id = mask_token_id
            pad = length - 1 - ids.shape[1]
            ids = torch.cat([ids, torch.full((1, pad), tokenizer.mask_token_id, dtype=ids.dtype)], dim=1)
            attention = torch.cat([attention, torch.zeros((1, pad), dtype=attention.dtype)], dim=1)
        # insert_prefix_token: [first token, prefix, the rest]; the prefix attended, of token type 0
        ids = torch.cat([ids[:, :1], torch.full((1, 1), prefix_id, dtype=ids.dtype), ids[:, 1:]], dim=1)
        attention = torch.cat([attention[:, :1], torch.ones((1, 1), dtype=attention.dtype), attention[:, 1:]], dim=1)
        if is_query and cfg["attend_to_expansion_tokens"] and cfg["do_query_expansion"]:
            attention.fill_(1)
        inputs = {"input_ids": ids, "attention_mask": attention, "token_type_ids": torch.zeros_like(ids)}
        with torch.no_grad():
            states = transformer({name: t.to(device) for name, t in inputs.items()})["token_embeddings"][0]
            projected = dense.activation_function(dense.linear(states)).float().cpu()  # on token_embeddings
        if is_query:
            keep = torch.ones(ids.shape[1], dtype=torch.bool) if expand else attention[0].bool()
        else:
            keep = attention[0].bool() & ~torch.isin(ids[0], torch.tensor(skiplist))
        out.append(torch.nn.functional.normalize(projected[keep], p=2, dim=1).numpy())
    return out


def maxsim(query: np.ndarray, documents: list[np.ndarray]) -> np.ndarray:
    """colbert_scores of one query [q, dim] against each document [d, dim] -> [num_documents]."""
    q = torch.from_numpy(query)
    return np.array([float(torch.einsum("sh,th->st", q, torch.from_numpy(d)).max(dim=-1).values.sum())
                     for d in documents], dtype=np.float32)
