"""SigLIP's original tokenizer (SiglipTokenizer: spiece.model, no tokenizer.json) read without sentencepiece:
the ModelProto reader, SentencePiece's normalizer and segmentation, and the ids the engine's tokenizer gives,
each equal to the reference's (sentencepiece itself; transformers' SiglipTokenizer with padding="max_length",
max_length=64, truncation=True) on the shared workload's paragraphs and on texts made to hit the edges:
punctuation, case, accents composed and not, CJK and Hangul jamo, emoji, unknown characters, runs of
whitespace, "▁", special tokens inside texts, empty texts, texts past 64 tokens. Checkpoints are tiny:
a unigram model trained here (tests/support/siglip_checkpoints.py)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from rose_embed.engine.model_files.loader import ModelLoadError, load_spec
from rose_embed.engine.model_files.spm_proto import read_sentencepiece_model
from rose_embed.engine.model_files.spm_tokenizer import segmenter
from rose_embed.engine.text.spm_normalizer import SentencePieceNormalizer
from rose_embed.engine.text.tokenizer import tokenizer_for
from tests.conftest import load_texts
from tests.support.siglip_checkpoints import TEXT_LEN, save_siglip, sentencepiece_tokenizer

# Characters that make SentencePiece's normalizer and SiglipTokenizer's canonicalization take their edges.
_EDGE_CHARS = list("aAeEsS zZ09,.!?'\"<>/-_ \t\n\r\u3000\u00a0\u2003▁ΣσςΟİ東京한😀🐱\u0301\u0300\u0308\u0338ﬁ＜＞／ｕ\u200b"
                   "\u200d¨ᄀ\u1161\u11a8ㄱㅏ①㍿½\ufdfaÅé") + ["</s>", "<unk>", "<pad>", " </s> ", "▁▁", "\u0301\u0301"]
_NAMED_TEXTS = [
    "", " ", "▁", "   ", "Hello, World!", "A PHOTO OF A DOG.", "  leading and trailing  ", "many    inner\t\tspaces",
    "café naïve résumé", "cafe\u0301", "東京タワーの写真", "한국어 사진", "an emoji 😀🐱 and 🦄", "ΟΔΟΣ ΣΟΦΟΣ",
    "punctuation!!! (yes) [no] {maybe} #tag @user", "a </s> inside", "</s>", "x</s>", "</s>y", " </s> <unk>hi",
    "<pad> is not special", "ﬁne ① ½ ＜ｕｎｋ＞", "the dog " * 40, "a</s>" * 70,
]


def _fuzz(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(_EDGE_CHARS) for _ in range(rng.randint(0, 30))) for _ in range(n)]


@pytest.fixture(scope="module")
def spm_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("siglip_spm")
    save_siglip(out, tokenizer=sentencepiece_tokenizer(out / "spm"), seed=3)
    return out


def _reference_ids(folder: Path, texts: list[str]) -> list[list[int]]:
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(str(folder))
    assert type(reference).__name__ == "SiglipTokenizer"
    return reference(texts, padding="max_length", max_length=TEXT_LEN, truncation=True)["input_ids"]


def _our_ids(folder: Path, texts: list[str]) -> list[list[int]]:
    return [ids.tolist() for ids in tokenizer_for(load_spec(str(folder))).encode(texts)]


def test_model_proto_is_read_as_sentencepiece_reads_it(spm_dir):
    import sentencepiece

    ours = read_sentencepiece_model(spm_dir / "spiece.model")
    theirs = sentencepiece.SentencePieceProcessor(model_file=str(spm_dir / "spiece.model"))
    assert len(ours.pieces) == theirs.get_piece_size() == 200
    assert [p.piece for p in ours.pieces] == [theirs.id_to_piece(i) for i in range(200)]
    assert [p.score for p in ours.pieces] == [theirs.get_score(i) for i in range(200)]
    assert [i for i, p in enumerate(ours.pieces) if p.type == 3] == [i for i in range(200) if theirs.is_control(i)]
    assert ours.unk_id == theirs.unk_id() == 2
    assert ours.add_dummy_prefix and ours.remove_extra_whitespaces and len(ours.precompiled_charsmap) > 100_000


def test_normalizer_and_segmenter_equal_sentencepiece(spm_dir):
    import sentencepiece

    model = read_sentencepiece_model(spm_dir / "spiece.model")
    normalizer, pieces = SentencePieceNormalizer(model), segmenter(model)
    reference = sentencepiece.SentencePieceProcessor(model_file=str(spm_dir / "spiece.model"))
    texts = [*load_texts(500), *_NAMED_TEXTS, *_fuzz(4000, seed=1), *map(chr, range(1, 0x3100)),
             *(chr(c) + "\u0301" for c in range(0x20, 0x3100, 5))]
    assert [normalizer.normalize(t) for t in texts] == [reference.normalize(t) for t in texts]
    assert [pieces.encode(normalizer.normalize(t)).ids for t in texts] == [reference.encode(t) for t in texts]


def test_ids_equal_siglip_tokenizer(spm_dir):
    texts = [*load_texts(2000), *_NAMED_TEXTS, *_fuzz(3000, seed=2)]
    theirs = _reference_ids(spm_dir, texts)
    assert _our_ids(spm_dir, texts) == theirs
    assert {len(ids) for ids in theirs} == {TEXT_LEN}
    assert theirs[_NAMED_TEXTS.index("a </s> inside") + 2000].count(1) > 1  # the special token was kept as one


@pytest.mark.parametrize("edit", [
    {"do_lower_case": False},
    # As transformers before 5 saved SigLIP's special tokens: stripping the text around them.
    {"added_tokens_decoder": {str(i): {"content": token, "lstrip": True, "rstrip": True, "normalized": False,
                                       "single_word": False, "special": True}
                              for i, token in ((1, "</s>"), (2, "<unk>"))}},
])
def test_ids_equal_siglip_tokenizer_for_each_config(spm_dir, tmp_path, edit):
    folder = Path(shutil.copytree(spm_dir, tmp_path / "copy"))
    _edit_config(folder, **edit)
    texts = [*_NAMED_TEXTS, *_fuzz(1500, seed=3)]
    assert _our_ids(folder, texts) == _reference_ids(folder, texts)


def test_untruncated_ids_strings_and_text(spm_dir):
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(str(spm_dir))
    tokenizer = tokenizer_for(load_spec(str(spm_dir)))
    texts = ["the dog " * 40, "Hello, World!", "a </s> inside"]
    bare = reference(texts, add_special_tokens=False)["input_ids"]
    assert tokenizer.encode_untruncated(texts, add_special_tokens=False) == bare and len(bare[0]) > TEXT_LEN
    assert tokenizer.encode_untruncated(texts) == reference(texts)["input_ids"]
    assert tokenizer.wrapping() == ((), (1,))
    ids = tokenizer.encode(["Hello, World!"])[0].tolist()
    assert tokenizer.token_strings(ids) == reference.convert_ids_to_tokens(ids)
    assert tokenizer.decode(ids) == reference.decode(ids, skip_special_tokens=True) == "hello world"


def test_spm_checkpoint_pads_with_eos_on_the_right(spm_dir):
    spec = load_spec(str(spm_dir))
    assert spec.clip.siglip_tokenizer and spec.clip.text_padding.pad_id == 1
    assert spec.clip.text_padding.side == "right"


@pytest.mark.parametrize("change, message", [
    (lambda folder: (folder / "spiece.model").unlink(), "needs spiece.model"),
    (lambda folder: (folder / "spiece.model").write_bytes(b"\x0a\xff"), "is not a SentencePiece model"),
    (lambda folder: _edit_config(folder, additional_special_tokens=["[MASK]"]), "special token '\\[MASK\\]'"),
    (lambda folder: _edit_config(folder, additional_special_tokens=["<extra_id_0>"]), "not a piece of spiece.model"),
    (lambda folder: _edit_config(folder, model_input_names=["input_ids", "attention_mask"]),
     "pads on the right and returns an attention mask"),
])
def test_what_cannot_be_followed_is_refused_by_name(spm_dir, tmp_path, change, message):
    folder = Path(shutil.copytree(spm_dir, tmp_path / "copy"))
    change(folder)
    with pytest.raises(ModelLoadError, match=message):
        load_spec(str(folder))


def test_bpe_sentencepiece_is_refused_by_name(spm_dir, tmp_path):
    import sentencepiece

    folder = Path(shutil.copytree(spm_dir, tmp_path / "copy"))
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(load_texts(100)), model_prefix=str(folder / "spiece"), vocab_size=200,
        model_type="bpe", pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2)
    with pytest.raises(ModelLoadError, match="type 2 is not supported"):
        load_spec(str(folder))


def _edit_config(folder: Path, **changes) -> None:
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, **changes}))
