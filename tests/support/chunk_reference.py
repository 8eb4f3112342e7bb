"""The reference for `long_inputs: chunk`, written without the engine's code: OpenAI's cookbook
method. Each text's tokens are cut into windows of `room` tokens, each wrapped in
[CLS] ... [SEP] and embedded by the caller's reference model, and the window vectors are
averaged weighted by the text tokens each holds, then normalised."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch


def window_by_window(tokenizer, texts: list[str], room: int,
                     window_vector: Callable[[torch.Tensor], np.ndarray]) -> np.ndarray:
    """[N, dim] float64: `window_vector` maps one wrapped window's ids [1, n] to its vector."""
    out = []
    for text in texts:
        content = tokenizer(text, add_special_tokens=False)["input_ids"]
        vectors, weights = [], []
        for lo in range(0, len(content), room):
            window = content[lo: lo + room]
            ids = torch.tensor([[tokenizer.cls_token_id, *window, tokenizer.sep_token_id]])
            vectors.append(window_vector(ids))
            weights.append(len(window))
        mean = np.average(np.stack(vectors), axis=0, weights=weights)
        out.append(mean / np.linalg.norm(mean))
    return np.stack(out)
