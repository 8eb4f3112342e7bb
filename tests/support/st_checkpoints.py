"""Tiny random checkpoints saved by sentence-transformers itself, for any Hugging Face architecture.

`save_st_model` builds a Hugging Face model from a config with random weights, wraps it in
sentence-transformers' own modules (Transformer, Pooling, then whatever comes after: Dense,
Normalize, ...) and saves it with `SentenceTransformer.save`, so the files on disk are the
ones the installed sentence-transformers writes. `SentenceTransformer(path).encode` on the
same directory is the reference the engine is compared with.

`save_architecture` does both steps for one architecture: its tokenizer's files, a tiny
config of that vocabulary, the Hugging Face save, then sentence-transformers' save.

Tokenizers are made here too, small and trained on the shared workload: WordPiece (the
default model's own files), RoBERTa's byte-level BPE, XLM-R's SentencePiece-style unigram,
Qwen's byte-level BPE that ends each text with <|endoftext|>, a byte-level BPE wrapping
each text in [CLS] ... [SEP] (ModernBERT's layout) and one wrapping it in <s> ... </s>
(Mistral's and Gemma's).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from tests.conftest import load_texts
from tests.support.qwen3_checkpoints import randomize, train_tokenizer, with_end_token

if TYPE_CHECKING:  # transformers takes seconds to import: the functions that build a model import it
    from transformers import PretrainedConfig

# A module after pooling: an instance, or a function of the width it receives -> an instance.
ModuleSpec = torch.nn.Module | Callable[[int], torch.nn.Module]


def _write_json(path: Path, value) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=1), encoding="utf-8")


def bert_tokenizer(out: Path) -> int:
    """The default model's WordPiece tokenizer (uncased, [CLS] ... [SEP]). Returns the vocabulary size."""
    from rose_embed.engine.model_files.loader import resolve_model_dir

    source = resolve_model_dir(None)[0]
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(source / name, out / name)
    return Tokenizer.from_file(str(out / "tokenizer.json")).get_vocab_size()


def _save_fast_tokenizer(tok: Tokenizer, out: Path, **special_tokens: str) -> None:
    tok.save(str(out / "tokenizer.json"))
    _write_json(out / "tokenizer_config.json", {"tokenizer_class": "PreTrainedTokenizerFast",
                                                "model_max_length": 512, **special_tokens})


def roberta_tokenizer(out: Path, vocab_size: int = 600) -> int:
    """RoBERTa's layout: byte-level BPE, <s> A </s>, <pad> = 1. Returns the vocabulary size."""
    tok = train_tokenizer(load_texts(300), vocab_size, ("<s>", "<pad>", "</s>", "<unk>", "<mask>"))
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), add_prefix_space=False)
    _save_fast_tokenizer(tok, out, bos_token="<s>", eos_token="</s>", sep_token="</s>", cls_token="<s>",
                         pad_token="<pad>", unk_token="<unk>", mask_token="<mask>")
    return tok.get_vocab_size()


def xlmr_tokenizer(out: Path, vocab_size: int = 600) -> int:
    """XLM-R's layout: a SentencePiece-style unigram with the ▁ metaspace, <s> A </s>."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tok.train_from_iterator(load_texts(300), trainers.UnigramTrainer(
        vocab_size=vocab_size, special_tokens=specials, unk_token="<unk>", show_progress=False))
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    _save_fast_tokenizer(tok, out, bos_token="<s>", eos_token="</s>", sep_token="</s>", cls_token="<s>",
                         pad_token="<pad>", unk_token="<unk>", mask_token="<mask>")
    return tok.get_vocab_size()


def qwen_tokenizer(out: Path) -> int:
    """Qwen's byte-level BPE whose post-processor appends <|endoftext|>, as Qwen3-Embedding's does."""
    tok = with_end_token(train_tokenizer(load_texts(300)))
    _save_fast_tokenizer(tok, out, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    return tok.get_vocab_size()


def _bpe_wrapping(out: Path, first: str, last: str, specials: tuple[str, ...], **special_tokens: str) -> int:
    """A byte-level BPE whose post-processor wraps each text in `first` ... `last`."""
    tok = train_tokenizer(load_texts(300), special_tokens=specials)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{first}:0 $A:0 {last}:0", pair=f"{first}:0 $A:0 {last}:0 $B:1 {last}:1",
        special_tokens=[(t, tok.token_to_id(t)) for t in (first, last)])
    _save_fast_tokenizer(tok, out, **special_tokens)
    return tok.get_vocab_size()


def bpe_encoder_tokenizer(out: Path) -> int:
    """ModernBERT's layout: byte-level BPE, [CLS] A [SEP]. Returns the vocabulary size."""
    return _bpe_wrapping(out, "[CLS]", "[SEP]", ("[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]"), cls_token="[CLS]",
                         sep_token="[SEP]", pad_token="[PAD]", mask_token="[MASK]", unk_token="[UNK]")


def llama_tokenizer(out: Path) -> int:
    """Mistral's (and, renamed, EmbeddingGemma's) layout: byte-level BPE, <s> A </s>, so that
    last-token pooling reads </s>. Returns the vocabulary size."""
    return _bpe_wrapping(out, "<s>", "</s>", ("<unk>", "<s>", "</s>", "<pad>"), bos_token="<s>", eos_token="</s>",
                         pad_token="<pad>", unk_token="<unk>")


def save_hf_model(out: Path, config: PretrainedConfig, *, seed: int = 0, trust_remote_code: bool = False,
                  emphasize: tuple[str, ...] = ()) -> Path:
    """A random-weight model of `config`, saved the Hugging Face way (tokenizer files go in `out` too);
    `emphasize`: tests/support/qwen3_checkpoints.py's randomize."""
    from transformers import AutoModel

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = AutoModel.from_config(config, trust_remote_code=trust_remote_code)
    randomize(model, seed, emphasize)
    model.save_pretrained(out)
    return out


PPLX_CODE = Path(__file__).resolve().parents[1] / "data" / "pplx_code"


def pplx_config(out: Path, config: PretrainedConfig) -> PretrainedConfig:
    """pplx-embed-v1's layout for a Qwen3 config: model_type bidirectional_pplx_qwen3 and its
    remote code (tests/data/pplx_code, a stand-in: bidirectional Qwen3) beside config.json."""
    from transformers import AutoConfig

    out.mkdir(parents=True, exist_ok=True)
    for name in ("modeling.py", "configuration.py"):
        shutil.copy(PPLX_CODE / name, out / name)
    cfg = config.to_dict()
    cfg.update(model_type="bidirectional_pplx_qwen3", architectures=["PPLXQwen3Model"],
               use_bidirectional_attention=True, use_cache=False,
               auto_map={"AutoConfig": "configuration.PPLXQwen3Config", "AutoModel": "modeling.PPLXQwen3Model"})
    _write_json(out / "config.json", cfg)
    return AutoConfig.from_pretrained(out, trust_remote_code=True)


def save_st_model(out: Path, hf_dir: Path, *, pooling: str | Sequence[str] = "mean", include_prompt: bool = True,
                  after: Sequence[ModuleSpec] = (), truncate_dim: int | None = None, prompts: dict | None = None,
                  max_seq_length: int | None = None, seed: int = 0, trust_remote_code: bool = False) -> Path:
    """Transformer(hf_dir) + Pooling(pooling) + `after`, saved by SentenceTransformer.save into `out`.

    An entry of `after` that is a function gets the width of the vector it receives, so a
    Dense can be written as `lambda width: Dense(width, 24)`. Weights of the modules after
    pooling are random (seeded).
    """
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    torch.manual_seed(seed)
    transformer = Transformer(str(hf_dir), max_seq_length=max_seq_length,
                              model_kwargs={"trust_remote_code": trust_remote_code},
                              config_kwargs={"trust_remote_code": trust_remote_code},
                              processor_kwargs={"trust_remote_code": trust_remote_code})
    modules: list[torch.nn.Module] = [transformer, Pooling(transformer.get_embedding_dimension(),
                                                           pooling_mode=pooling, include_prompt=include_prompt)]
    width = modules[-1].get_embedding_dimension()
    for spec in after:
        module = spec if isinstance(spec, torch.nn.Module) else spec(width)
        modules.append(module)
        if hasattr(module, "get_embedding_dimension") and module.get_embedding_dimension():
            width = module.get_embedding_dimension()
    model = SentenceTransformer(modules=modules, truncate_dim=truncate_dim, prompts=prompts, device="cpu")
    model.save(str(out))
    return out


def save_architecture(path: Path, tokenizer: Callable[[Path], int], config: Callable[[int], PretrainedConfig], *,
                      seed: int = 0, emphasize: tuple[str, ...] = (), **st_options) -> Path:
    """`tokenizer`'s files and a random model of `config(vocabulary size)` saved the Hugging Face
    way into `{path}-hf`, then by sentence-transformers into `path` (`st_options`: save_st_model's)."""
    hf_dir = path.parent / f"{path.name}-hf"
    hf_dir.mkdir(parents=True, exist_ok=True)
    save_hf_model(hf_dir, config(tokenizer(hf_dir)), seed=seed, emphasize=emphasize)
    return save_st_model(path, hf_dir, seed=seed, **st_options)


def tiny_bert_config(vocab_size: int) -> PretrainedConfig:
    """A two-layer BERT of width 64: a real server loads it in a moment."""
    from transformers import BertConfig

    return BertConfig(vocab_size=vocab_size, max_position_embeddings=512, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4)


def load_reference(path: Path, trust_remote_code: bool = False):
    """sentence-transformers' own reading of a saved checkpoint, fp32 on the CPU."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(path), device="cpu", trust_remote_code=trust_remote_code)
