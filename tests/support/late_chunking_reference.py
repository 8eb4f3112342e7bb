"""The reference for late chunking: the same computation on Hugging Face transformers' AutoModel.

Written without the engine's code: each chunk tokenized alone without special tokens; a
document's chunks laid end to end, greedily into windows of at most the model's limit, each
window wrapped as the tokenizer wraps one text ([CLS] ... [SEP] for BERT, ... <|endoftext|> for
the Qwen tokenizer); one AutoModel forward per window, in fp32; each chunk's vector the mean
of the last hidden states over its own tokens, then the checkpoint's modules after pooling
(a Dense, a Normalize, ...), run by sentence-transformers itself. A chunk longer than a window
is truncated to it ("truncate"), or ("chunk") fills the room left and continues in the next
windows, its vector the token-weighted mean of its parts'.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from tests.support.st_checkpoints import load_reference


def sentences(text: str) -> list[str]:
    """A paragraph's sentences, as a document's chunks."""
    return [s.strip() + "." for s in text.replace("\n", " ").split(". ") if s.strip()]


@torch.inference_mode()
def hf_late_chunked(path: Path, documents: list[list[str]], max_seq_len: int, mode: str = "truncate",
                    trust_remote_code: bool = False) -> tuple[np.ndarray, int, list[int]]:
    """(vectors [chunks, dim] after the checkpoint's modules, tokens the model read, windows per document)."""
    from transformers import AutoModel, AutoTokenizer

    reference = load_reference(path, trust_remote_code)
    head = list(reference)[2:]
    model = AutoModel.from_pretrained(path, trust_remote_code=trust_remote_code, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    probe = tokenizer("probe text").input_ids
    bare = tokenizer("probe text", add_special_tokens=False).input_ids
    before, after = probe[: probe.index(bare[0])], probe[probe.index(bare[0]) + len(bare):]
    room = max_seq_len - len(before) - len(after)
    out, num_tokens, num_windows = [], 0, []
    for document in documents:
        windows, current = [], []  # each window a list of (chunk, its tokens there)
        for c, chunk in enumerate(document):
            ids = tokenizer(chunk, add_special_tokens=False).input_ids
            if len(ids) <= room or mode == "truncate":  # whole chunks, greedily
                if current and sum(len(p) for _, p in current) + len(ids[:room]) > room:
                    windows.append(current)
                    current = []
                current.append((c, ids[:room]))
                continue
            for token in ids:  # mode "chunk": token by token into the room left, then new windows
                if sum(len(p) for _, p in current) == room:
                    windows.append(current)
                    current = []
                if not current or current[-1][0] != c:
                    current.append((c, []))
                current[-1][1].append(token)
        windows.append(current)
        num_windows.append(len(windows))
        sums = {}  # chunk -> (sum of its pooled vectors weighted by tokens, tokens)
        for window in windows:
            ids = torch.tensor([[*before, *(t for _, p in window for t in p), *after]])
            num_tokens += ids.shape[1]
            states = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state[0].double()
            start = len(before)
            for c, piece in window:
                mean = states[start: start + len(piece)].mean(0)
                start += len(piece)
                vector = mean.float()[None]
                for module in head:
                    vector = module({"sentence_embedding": vector})["sentence_embedding"]
                total, count = sums.get(c, (0.0, 0))
                sums[c] = (total + vector[0].double().numpy() * len(piece), count + len(piece))
        for c in range(len(document)):
            total, count = sums[c]
            out.append(total / count)
    return np.stack(out), num_tokens, num_windows
