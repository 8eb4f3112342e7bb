"""Tiny random rerankers on disk, with the reference that scores them.

Cross-encoders (BERT, XLM-R, ModernBERT) are `*ForSequenceClassification` models of one label
with random weights, saved by sentence-transformers' own `CrossEncoder.save`; the reference
is `CrossEncoder(path).predict` on the same directory. The Qwen3 reranker is a tiny
Qwen3ForCausalLM whose tokenizer knows Qwen3-Reranker's template tokens and "yes" / "no"; its
reference is Qwen3-Reranker's model card, computed with transformers: the template, then
p(yes) / (p(yes) + p(no)) at the last position.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from tests.conftest import load_texts
from tests.support.qwen3_checkpoints import END_TOKEN, randomize, tiny_config, train_tokenizer
from tests.support.st_checkpoints import bert_tokenizer, bpe_encoder_tokenizer, xlmr_tokenizer

if TYPE_CHECKING:  # transformers takes seconds to import: the functions that build a model import it
    from transformers import PretrainedConfig

# The cross-encoders' limit (their tokenizer's model_max_length, as CrossEncoder(max_length=...)
# saves it): short enough that the shared workload's longer paragraphs are truncated in a pair.
MAX_LENGTH = 128
_SIZES = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)


def _bert(vocab_size: int) -> PretrainedConfig:
    from transformers import BertConfig

    return BertConfig(vocab_size=vocab_size, max_position_embeddings=512, **_SIZES)


def _xlmr(vocab_size: int) -> PretrainedConfig:
    from transformers import XLMRobertaConfig

    # Positions count from padding_idx + 1, so 514 slots hold 512 tokens.
    return XLMRobertaConfig(vocab_size=vocab_size, max_position_embeddings=514, pad_token_id=1,
                            bos_token_id=0, eos_token_id=2, **_SIZES)


def _modernbert(vocab_size: int) -> PretrainedConfig:
    from transformers import ModernBertConfig

    return ModernBertConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                            num_attention_heads=4, max_position_embeddings=512, local_attention=16,
                            global_attn_every_n_layers=2, pad_token_id=2, bos_token_id=0, cls_token_id=0,
                            eos_token_id=1, sep_token_id=1, classifier_pooling="mean")


# name -> (tokenizer writer, config of a vocabulary size)
CROSS_ENCODERS: dict[str, tuple[Callable[[Path], int], Callable[[int], PretrainedConfig]]] = {
    "bert": (bert_tokenizer, _bert),
    "xlm-roberta": (xlmr_tokenizer, _xlmr),
    "modernbert": (bpe_encoder_tokenizer, _modernbert),
}


def save_cross_encoder(path: Path, name: str, *, num_labels: int = 1, seed: int = 0) -> Path:
    """A random `name` cross-encoder saved by the Hugging Face way into `{path}-hf`, then by
    sentence-transformers' CrossEncoder.save into `path`."""
    from sentence_transformers import CrossEncoder
    from transformers import AutoModelForSequenceClassification

    tokenizer, config_of = CROSS_ENCODERS[name]
    hf_dir = path.parent / f"{path.name}-hf"
    hf_dir.mkdir(parents=True, exist_ok=True)
    config = config_of(tokenizer(hf_dir))
    config.num_labels = num_labels
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(config)
    randomize(model, seed)
    model.save_pretrained(hf_dir)
    CrossEncoder(str(hf_dir), device="cpu", max_length=MAX_LENGTH).save(str(path))
    return path


# Qwen3-Reranker's model card, word for word: the reference builds its prompts from these, not
# from the engine's copy of them.
CARD_PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
               "Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n")
CARD_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
CARD_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"


def card_body(query: str, document: str) -> str:
    return f"<Instruct>: {CARD_INSTRUCTION}\n<Query>: {query}\n<Document>: {document}"


def save_qwen3_reranker(path: Path, *, marked: bool = True, seed: int = 3) -> Path:
    """A tiny Qwen3ForCausalLM with Qwen's template tokens; `marked`: a CrossEncoder
    config_sentence_transformers.json names it a reranker (else only the kind flag can)."""
    from transformers import PreTrainedTokenizerFast, Qwen3ForCausalLM

    specials = (END_TOKEN, "<|im_end|>", "<|im_start|>", "<think>", "</think>")
    tok = train_tokenizer(load_texts(300), special_tokens=specials)
    tok.add_tokens([word for word in ("yes", "no") if tok.token_to_id(word) is None])
    path.mkdir(parents=True, exist_ok=True)
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast",
                                                            "eos_token": "<|im_end|>", "pad_token": END_TOKEN}))
    model = Qwen3ForCausalLM(tiny_config(tok.get_vocab_size(), tie_word_embeddings=False))
    randomize(model, seed)
    model.save_pretrained(path)
    if marked:
        (path / "config_sentence_transformers.json").write_text(json.dumps({"model_type": "CrossEncoder"}))
    PreTrainedTokenizerFast(tokenizer_file=str(path / "tokenizer.json"))  # the reference can read it
    return path


@torch.no_grad()
def qwen3_card_scores(path: Path, query: str, documents: list[str], max_length: int, *,
                      dtype: torch.dtype = torch.float32, device: str = "cpu") -> list[float]:
    """Qwen3-Reranker's model card on this checkpoint: format, tokenize with truncation to leave room
    for the template, wrap, then p(yes) / (p(yes) + p(no)) at the last position (one pair at a time).
    Another dtype or device gives the reference's own rounding there (a GPU test's floor)."""
    from transformers import PreTrainedTokenizerFast, Qwen3ForCausalLM

    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(path / "tokenizer.json"))
    model = Qwen3ForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
    prefix = tokenizer.encode(CARD_PREFIX, add_special_tokens=False)
    suffix = tokenizer.encode(CARD_SUFFIX, add_special_tokens=False)
    yes, no = tokenizer.convert_tokens_to_ids("yes"), tokenizer.convert_tokens_to_ids("no")
    scores = []
    for document in documents:
        ids = tokenizer(card_body(query, document), truncation="longest_first",
                        max_length=max_length - len(prefix) - len(suffix))["input_ids"]
        logits = model(input_ids=torch.tensor([prefix + ids + suffix], device=device)).logits[0, -1].float()
        pair = torch.log_softmax(torch.stack([logits[no], logits[yes]]), dim=0)
        scores.append(pair[1].exp().item())
    return scores
