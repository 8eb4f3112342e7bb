"""Inputs longer than the model's limit: truncated, refused, or embedded window by window.

Three modes (engine.contract.config.LONG_INPUT_MODES; the server and the corpus job take one per
run, and a request may name its own):

- truncate: the first tokens that fit, as sentence-transformers does (the default).
- error: refused with InputTooLongError (the server answers OpenAI's context-length 400).
- chunk: the text's own tokens (tokenized once, without the limit) are cut into consecutive
  windows, each as long as the limit allows once it is wrapped as the tokenizer wraps one
  text, with the prompt's tokens after the leading special tokens: for BERT
  [CLS] + prompt + window + [SEP]. Each window is embedded as an input of its own, and the
  text's vector is the mean of its windows' vectors weighted by how many of the text's
  tokens each window holds, then normalised: OpenAI's cookbook method for texts longer
  than the context ("embedding long inputs").

An input that fits is embedded exactly as in truncate mode, whatever the mode. These
functions see token ids and vectors only; the server's route and the corpus job call them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


class InputTooLongError(ValueError):
    """An input is longer than the model's limit, and the mode is "error"."""

    def __init__(self, index: int, num_tokens: int, max_seq_len: int):
        super().__init__(f"input {index} has {num_tokens} tokens, more than the model's limit of {max_seq_len}")
        self.index, self.num_tokens, self.max_seq_len = index, num_tokens, max_seq_len

    def __reduce__(self):  # rebuilt from its fields when it crosses from a tokenizer process
        return type(self), (self.index, self.num_tokens, self.max_seq_len)


class CannotWindowError(ValueError):
    """Chunk mode cannot cut this input into windows wrapped as the model's texts are."""


@dataclass(frozen=True)
class FittedInputs:
    """Inputs as sequences the model takes, and how to turn their vectors into one per input."""

    seqs: list[np.ndarray]  # one per input, or an over-long input's windows in its place
    num_windows: list[int]  # per input: 1, or the number of its windows
    weights: list[int]  # per sequence: how many of its input's own tokens it holds

    @property
    def num_inputs(self) -> int:
        return len(self.num_windows)

    @classmethod
    def one_each(cls, seqs: list[np.ndarray]) -> FittedInputs:
        return cls(seqs, [1] * len(seqs), [len(s) for s in seqs])

    def combine(self, vectors: np.ndarray, normalize: bool) -> np.ndarray:
        """[len(seqs), dim] -> [inputs, dim]; an input of one sequence keeps its vector as it is."""
        if len(self.seqs) == len(self.num_windows):
            return vectors
        out = np.empty((len(self.num_windows), vectors.shape[1]), dtype=np.float32)
        first = 0
        for i, count in enumerate(self.num_windows):
            window = slice(first, first + count)
            out[i] = vectors[first] if count == 1 else combine_windows(vectors[window], self.weights[window], normalize)
            first += count
        return out


def windows(content: Sequence[int], before: Sequence[int], after: Sequence[int], max_seq_len: int) -> list[np.ndarray]:
    """`content` cut into consecutive windows, each `before + window + after` and at most
    max_seq_len long (only the last one shorter)."""
    size = max_seq_len - len(before) - len(after)
    if size < 1:
        raise CannotWindowError(f"the special and prompt tokens ({len(before) + len(after)}) leave no room for "
                                f"the text in the model's limit of {max_seq_len} tokens")
    return [np.asarray([*before, *content[lo: lo + size], *after], dtype=np.int32)
            for lo in range(0, len(content), size)]


def combine_windows(vectors: np.ndarray, weights: Sequence[int], normalize: bool) -> np.ndarray:
    """The weighted mean of one text's window vectors [num_windows, dim], unit length where
    the model's vectors are (a quantising model's raw vectors keep their scale, which its
    int8 output reads; its float output is normalised on the wire)."""
    mean = np.average(vectors.astype(np.float64), axis=0, weights=np.asarray(weights, dtype=np.float64))
    if normalize:
        mean = mean / max(float(np.linalg.norm(mean)), 1e-12)
    return mean.astype(np.float32)


def fit_texts(tokenizer, mode: str, texts: list[str], prompt: str, seqs: list[np.ndarray]) -> FittedInputs:
    """`seqs` are tokenizer.encode of the prompted texts, cut at the limit; `tokenizer` is
    engine.text.tokenizer.TextTokenizer. Only a text that came back at the limit can be longer:
    those few are tokenized again without it."""
    max_len = tokenizer.max_seq_len
    suspects = [i for i, s in enumerate(seqs) if len(s) >= max_len] if mode != "truncate" else []
    if not suspects:
        return FittedInputs.one_each(seqs)
    counts = [len(ids) for ids in tokenizer.encode_untruncated([prompt + texts[i] for i in suspects])]
    over = [i for i, count in zip(suspects, counts) if count > max_len]
    if not over:
        return FittedInputs.one_each(seqs)
    if mode == "error":
        longest = max(zip(counts, suspects))
        raise InputTooLongError(longest[1], longest[0], max_len)
    before, after = _wrapping(tokenizer)
    # The prompt is tokenized apart from the text, so that every window starts with the same prompt tokens.
    prompt_ids = tokenizer.encode_untruncated([prompt], add_special_tokens=False)[0] if prompt else []
    contents = tokenizer.encode_untruncated([texts[i] for i in over], add_special_tokens=False)
    before = (*before, *prompt_ids)
    cut = {i: windows(content, before, after, max_len) for i, content in zip(over, contents)}
    return _with_windows(seqs, cut, len(before) + len(after))


def fit_token_ids(tokenizer, mode: str, token_ids: list[list[int]]) -> FittedInputs:
    """The model's own token ids (the server's `model` token-id mode), used as they are where they fit.

    In chunk mode an over-long sequence is read as one text's tokens: the tokenizer's
    special tokens are taken off its ends where it carries them, and every window is
    wrapped in them, as fit_texts wraps a text's windows (no prompt: token ids get none).
    """
    max_len = tokenizer.max_seq_len
    over = [i for i, ids in enumerate(token_ids) if len(ids) > max_len]
    if over and mode == "error":
        longest = max(over, key=lambda i: len(token_ids[i]))
        raise InputTooLongError(longest, len(token_ids[longest]), max_len)
    seqs = [tokenizer.truncate_ids(ids) for ids in token_ids]
    if not over or mode == "truncate":
        return FittedInputs.one_each(seqs)
    before, after = _wrapping(tokenizer)
    cut = {i: windows(_unwrapped(token_ids[i], before, after), before, after, max_len) for i in over}
    return _with_windows(seqs, cut, len(before) + len(after))


def _wrapping(tokenizer) -> tuple[tuple[int, ...], tuple[int, ...]]:
    try:
        return tokenizer.wrapping()
    except ValueError as exc:
        raise CannotWindowError(str(exc)) from exc


def _unwrapped(ids: list[int], before: tuple[int, ...], after: tuple[int, ...]) -> list[int]:
    start = len(before) if before and tuple(ids[: len(before)]) == before else 0
    end = len(ids) - len(after) if after and tuple(ids[len(ids) - len(after):]) == after else len(ids)
    return ids[start:end]


def _with_windows(seqs: list[np.ndarray], cut: dict[int, list[np.ndarray]], num_added: int) -> FittedInputs:
    """Every input's sequence, an over-long one's windows in its place; `num_added` is the
    special and prompt tokens of each window, which its weight leaves out."""
    out, num_windows, weights = [], [], []
    for i, seq in enumerate(seqs):
        if i not in cut:
            out.append(seq)
            num_windows.append(1)
            weights.append(len(seq))
            continue
        out.extend(cut[i])
        num_windows.append(len(cut[i]))
        weights.extend(len(window) - num_added for window in cut[i])
    return FittedInputs(out, num_windows, weights)
