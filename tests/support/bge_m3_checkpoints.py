"""Tiny random checkpoints in BAAI/bge-m3's layout, and FlagEmbedding's three outputs transcribed as the reference.

FlagEmbedding pulls in many packages (peft, datasets, accelerate, ...), so the tests do not import it:
`reference_outputs` transcribes what `BGEM3FlagModel.encode(texts, return_dense=True, return_sparse=True,
return_colbert_vecs=True)` computes, from FlagOpen/FlagEmbedding:

  FlagEmbedding/inference/embedder/encoder_only/m3.py, M3Embedder.encode_single_device: the texts
      tokenized with truncation at max_length, padded per batch; `_process_token_weights` (each token id's
      largest weight, ids of the cls, eos, pad and unk tokens left out, weights > 0 kept, keys str(id)),
      `_process_colbert_vecs` (the first tokens_num - 1 rows: every token after the CLS)
  FlagEmbedding/finetune/embedder/encoder_only/m3/modeling.py, EncoderOnlyEmbedderM3ModelForInference.forward:
      `_dense_embedding` (cls: last_hidden_state[:, 0]), `_sparse_embedding` with return_embedding False
      (relu(sparse_linear(last_hidden_state))), `_colbert_embedding` (colbert_linear(last_hidden_state[:, 1:])
      times the attention mask), then F.normalize of the dense and colbert vectors (normalize_embeddings True)
  FlagEmbedding/finetune/embedder/encoder_only/m3/runner.py, EncoderOnlyEmbedderM3Runner.get_model: AutoModel,
      and the two nn.Linear loaded from colbert_linear.pt and sparse_linear.pt

`save_bge_m3` writes BAAI/bge-m3's files: an XLMRobertaModel saved by transformers, sentence-transformers'
Transformer + Pooling(cls) + Normalize saved by sentence-transformers, and the two linears' state dicts
saved with torch.save, as EncoderOnlyEmbedderM3Model.save writes them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from tests.support.st_checkpoints import save_architecture, xlmr_tokenizer

HIDDEN = 32


def _xlmr_config(vocab_size: int):
    from transformers import XLMRobertaConfig

    return XLMRobertaConfig(vocab_size=vocab_size, max_position_embeddings=514, pad_token_id=1, bos_token_id=0,
                            eos_token_id=2, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=4)


def save_bge_m3(path: Path, *, colbert_dim: int = HIDDEN, seed: int = 0, max_seq_length: int = 128,
                with_colbert: bool = True, with_sparse: bool = True) -> Path:
    """A random tiny XLM-R in BGE-M3's layout; `colbert_dim` other than the width tests that D is read from the file."""
    from sentence_transformers.sentence_transformer.modules import Normalize

    save_architecture(path, xlmr_tokenizer, _xlmr_config, seed=seed, pooling="cls", after=[Normalize()],
                      max_seq_length=max_seq_length)
    generator = torch.Generator().manual_seed(seed + 1)
    colbert = torch.nn.Linear(HIDDEN, colbert_dim)
    sparse = torch.nn.Linear(HIDDEN, 1)
    with torch.no_grad():
        for linear in (colbert, sparse):
            linear.weight.copy_(torch.randn(linear.weight.shape, generator=generator) * 0.3)
            linear.bias.copy_(torch.randn(linear.bias.shape, generator=generator) * 0.1)
    if with_colbert:
        torch.save(colbert.state_dict(), path / "colbert_linear.pt")
    if with_sparse:
        torch.save(sparse.state_dict(), path / "sparse_linear.pt")
    return path


def _linear(path: Path) -> torch.nn.Linear:
    state = torch.load(path, map_location="cpu", weights_only=True)
    linear = torch.nn.Linear(state["weight"].shape[1], state["weight"].shape[0])
    linear.load_state_dict(state)
    return linear


def _process_token_weights(token_weights: np.ndarray, input_ids: list[int],
                           unused_tokens: set[int]) -> dict[str, float]:
    result: dict[str, float] = {}
    for w, idx in zip(token_weights, input_ids):
        if idx not in unused_tokens and w > 0:
            key = str(idx)
            if w > result.get(key, 0):
                result[key] = w
    return result


@torch.no_grad()
def reference_outputs(path: Path, texts: list[str], max_length: int = 128, batch_size: int = 8,
                      device: str = "cpu", dtype: torch.dtype = torch.float32) -> dict[str, list]:
    """{"dense_vecs": [H] per text, "lexical_weights": {str(id): weight} per text, "colbert_vecs": [n, D] per
    text}, as BGEM3FlagModel(path).encode(texts, max_length=..., return_dense/sparse/colbert_vecs=True) gives
    them (fp32 on the CPU: use_fp16 is off there; `dtype` for the GPU tests)."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).to(device=device, dtype=dtype).eval()
    colbert_linear = _linear(path / "colbert_linear.pt").to(device=device, dtype=dtype)
    sparse_linear = _linear(path / "sparse_linear.pt").to(device=device, dtype=dtype)
    unused = {tokenizer.convert_tokens_to_ids(tokenizer.special_tokens_map[name])
              for name in ("cls_token", "eos_token", "pad_token", "unk_token") if name in tokenizer.special_tokens_map}
    dense, lexical, colbert = [], [], []
    for start in range(0, len(texts), batch_size):
        batch = tokenizer(texts[start:start + batch_size], truncation=True, max_length=max_length, padding=True,
                          return_tensors="pt").to(device)
        hidden = model(**batch, return_dict=True).last_hidden_state
        dense.extend(F.normalize(hidden[:, 0], dim=-1).float().cpu().numpy())
        weights = torch.relu(sparse_linear(hidden)).squeeze(-1).float().cpu().numpy()
        vecs = colbert_linear(hidden[:, 1:]) * batch["attention_mask"][:, 1:][:, :, None].to(hidden.dtype)
        vecs = F.normalize(vecs, dim=-1).float().cpu().numpy()
        for i, ids in enumerate(batch["input_ids"].cpu().numpy().tolist()):
            lexical.append(_process_token_weights(weights[i], ids, unused))
            colbert.append(vecs[i][: int(batch["attention_mask"][i].sum()) - 1])
    return {"dense_vecs": dense, "lexical_weights": lexical, "colbert_vecs": colbert}


def as_pairs(lexical: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """A lexical_weights dict as (ids ascending, weights), the server's sparse answer's order."""
    ids = np.array(sorted(int(k) for k in lexical), dtype=np.int64)
    return ids, np.array([lexical[str(i)] for i in ids], dtype=np.float32)


@torch.no_grad()
def reference_lexical_weights_of_ids(path: Path, ids: list[int]) -> dict[str, float]:
    """FlagEmbedding's lexical weights of one sequence given as token ids (unpadded), whatever its first token:
    the model's states, relu(sparse_linear), then `_process_token_weights` with the tokenizer's unused ids."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).eval()
    unused = {tokenizer.convert_tokens_to_ids(tokenizer.special_tokens_map[name])
              for name in ("cls_token", "eos_token", "pad_token", "unk_token") if name in tokenizer.special_tokens_map}
    hidden = model(input_ids=torch.tensor([ids]), return_dict=True).last_hidden_state[0]
    weights = torch.relu(_linear(path / "sparse_linear.pt")(hidden)).squeeze(-1).numpy()
    return _process_token_weights(weights, ids, unused)
