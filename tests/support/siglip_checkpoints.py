"""Tiny random SigLIP checkpoints saved by transformers' SiglipModel and SiglipProcessor themselves, with a
Gemma tokenizer over a small vocabulary as SigLIP 2's fixed-resolution checkpoints ship one (no <bos>,
<eos> after each text, <pad> id 0; tokenizer.json), or with SigLIP's original tokenizer (SiglipTokenizer over a
small SentencePiece unigram model trained here: spiece.model, no tokenizer.json).

The tokenizer's padding side and whether it returns an attention mask decide a text's vector
(engine/model_files/siglip.py): `tokenizer` picks them as a checkpoint's tokenizer_config.json would.
"""

from __future__ import annotations

from pathlib import Path

import torch

TEXT_LEN = 64  # SigLIP's position table, the length its texts are padded to (transformers' pipeline pads to 64)
IMAGE_SIZE = 32
_SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>")
_MERGES = [("t", "h"), ("th", "e"), ("c", "a"), ("ca", "t"), ("▁", "the"), ("d", "o"), ("do", "g")]


def siglip_tokenizer(padding_side: str | None = None, attention_mask: bool = True, lowercasing: bool = False):
    """Gemma's tokenizer (or, with `lowercasing`, Siglip2Tokenizer: the same, texts lowercased) over letters,
    digits and a few merges; `padding_side` None keeps the class's own (left)."""
    from transformers import GemmaTokenizer, Siglip2Tokenizer

    pieces = [*_SPECIALS, *(f"<unused{i}>" for i in range(40)),  # as Gemma's: past id 100, which warm-up sends
              "▁", *"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'<>|",
              *(a + b for a, b in _MERGES)]
    vocab = {piece: i for i, piece in enumerate(dict.fromkeys(pieces))}
    options = {"model_max_length": TEXT_LEN}
    if padding_side is not None:
        options["padding_side"] = padding_side
    if not attention_mask:
        options["model_input_names"] = ["input_ids"]
    cls = Siglip2Tokenizer if lowercasing else GemmaTokenizer
    return cls(vocab=vocab, merges=list(_MERGES), add_bos_token=False, add_eos_token=True, **options)


def sentencepiece_tokenizer(folder: Path):
    """SiglipTokenizer over a 200-piece unigram SentencePiece model trained into `folder` on the shared workload's
    first paragraphs and a line of accents, CJK and symbols (characters it never saw, Greek and emoji among them,
    stay unknown), with
    T5's ids as SigLIP's spiece.model has them (<pad> 0, </s> 1, <unk> 2) and model_input_names ["input_ids"],
    as transformers' SigLIP conversion saves it."""
    import sentencepiece
    from transformers import SiglipTokenizer

    from tests.conftest import load_texts

    folder.mkdir(parents=True, exist_ok=True)
    lines = [*load_texts(300), "café naïve résumé Über straße ÉCOLE 東京 日本語 한국어 ＜ｆｕｌｌ＞ ① ﬁ ½ <unk> </s> #$%&*+=@^_|~"]
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(folder / "spiece"), vocab_size=200,
        model_type="unigram", character_coverage=1.0, pad_id=0, eos_id=1, unk_id=2, bos_id=-1, num_threads=1,
        minloglevel=2)
    return SiglipTokenizer(vocab_file=str(folder / "spiece.model"), model_input_names=["input_ids"])


def save_siglip(out: Path, *, tokenizer=None, image_processor: dict | None = None, seed: int = 0,
                text_act: str = "gelu_pytorch_tanh", vision_act: str = "gelu_pytorch_tanh",
                image_size: int = IMAGE_SIZE, patch_size: int = 8):
    """A transformers SiglipModel and SiglipProcessor saved to `out`; returns the model (eval, float32)."""
    from transformers import SiglipConfig, SiglipImageProcessorPil, SiglipModel, SiglipProcessor

    tokenizer = tokenizer or siglip_tokenizer()
    text = {"vocab_size": len(tokenizer), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "max_position_embeddings": TEXT_LEN, "hidden_act": text_act,
            "projection_size": 48, "pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id,
            "bos_token_id": None}
    vision = {"hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
              "image_size": image_size, "patch_size": patch_size, "hidden_act": vision_act}
    torch.manual_seed(seed)
    model = SiglipModel(SiglipConfig(text_config=text, vision_config=vision)).eval()
    with torch.no_grad():  # LayerNorms and biases away from their 1 / 0 starts, so that loading them is tested
        for name, param in model.named_parameters():
            if name.endswith(("bias", "layer_norm1.weight", "layer_norm2.weight", "layernorm.weight",
                              "final_layer_norm.weight", "probe")):
                param.add_(0.1 * torch.randn_like(param))
    model.save_pretrained(out)
    settings = image_processor or {"size": {"height": image_size, "width": image_size}}
    SiglipProcessor(image_processor=SiglipImageProcessorPil(**settings), tokenizer=tokenizer).save_pretrained(out)
    return model
