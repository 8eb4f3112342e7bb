"""A model's JSON file that does not parse is refused with its path and where it breaks, whichever
of the files the loader reads it is; the parser's bare message names neither file nor model."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rose_embed.engine.model_files.loader import ModelLoadError, load_spec, load_state_dict, resolve_model_dir

BROKEN = "{not json"
WHERE = "is not valid JSON (line 1, column 2: Expecting property name enclosed in double quotes)"


@pytest.fixture
def minilm(tmp_path) -> Path:
    """The default model's files but its weights, which describing it does not read."""
    return shutil.copytree(resolve_model_dir(None)[0], tmp_path / "minilm", ignore=shutil.ignore_patterns("*.safetensors"))


@pytest.mark.parametrize("name", ["config.json", "modules.json", "sentence_bert_config.json",
                                  "config_sentence_transformers.json", "1_Pooling/config.json"])
def test_a_broken_json_file_is_named(minilm, name):
    (minilm / name).write_text(BROKEN)
    with pytest.raises(ModelLoadError) as raised:
        load_spec(str(minilm))
    assert str(raised.value) == f"{minilm / name} {WHERE}"


def test_a_broken_tokenizer_config_is_named(minilm):
    # Without sentence_bert_config.json's max_seq_length the limit comes from tokenizer_config.json.
    (minilm / "sentence_bert_config.json").unlink()
    assert load_spec(str(minilm)).max_seq_len == 512
    (minilm / "tokenizer_config.json").write_text(BROKEN)
    with pytest.raises(ModelLoadError, match="^" + str(minilm / "tokenizer_config.json") + " is not valid JSON"):
        load_spec(str(minilm))


def test_the_tokenizers_end_token_lookup_names_a_broken_tokenizer_config(minilm):
    from tokenizers import Tokenizer

    from rose_embed.engine.text.tokenizer import _end_token

    tokenizer = Tokenizer.from_file(str(minilm / "tokenizer.json"))
    (minilm / "tokenizer_config.json").write_text('{"eos_token": "[SEP]"}')
    assert _end_token(minilm, tokenizer) == "[SEP]"
    (minilm / "tokenizer_config.json").write_text(BROKEN)
    with pytest.raises(ModelLoadError, match="tokenizer_config.json is not valid JSON"):
        _end_token(minilm, tokenizer)


def test_a_broken_weight_index_is_named(minilm):
    (minilm / "model.safetensors.index.json").write_text(BROKEN)
    with pytest.raises(ModelLoadError) as raised:
        load_state_dict(minilm)
    assert str(raised.value) == f"{minilm / 'model.safetensors.index.json'} {WHERE}"


def test_a_json_file_that_is_not_utf8_is_named(minilm):
    (minilm / "config.json").write_bytes(b'{"model_type": "\xff"}')
    with pytest.raises(ModelLoadError) as raised:
        load_spec(str(minilm))
    assert str(raised.value) == f"{minilm / 'config.json'} is not valid JSON (not UTF-8 text at byte 16)"


def test_a_config_that_is_not_an_object_is_named_not_missing(minilm):
    (minilm / "config.json").write_text('["bert"]')
    with pytest.raises(ModelLoadError) as raised:
        load_spec(str(minilm))
    assert str(raised.value) == f"{minilm / 'config.json'} is not a JSON object ({{...}}): it holds an array"


def test_serve_names_the_broken_file_in_one_line_and_exits_1(minilm):
    import subprocess
    import sys

    from tests.conftest import REPO, free_port

    (minilm / "config.json").write_text(BROKEN)
    run = subprocess.run([sys.executable, "-m", "rose_embed", "serve", "--model", str(minilm), "--port", str(free_port())],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stderr
    assert run.stderr.splitlines() == [f"rose-embed: {minilm / 'config.json'} {WHERE}"]


def test_serve_names_a_broken_tokenizer_in_one_line_before_it_starts(minilm):
    import subprocess
    import sys

    from tests.conftest import REPO, free_port

    (minilm / "tokenizer.json").write_text(BROKEN)
    run = subprocess.run([sys.executable, "-m", "rose_embed", "serve", "--model", str(minilm), "--port", str(free_port())],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stderr
    (line,) = run.stderr.splitlines()
    assert line.startswith(f"rose-embed: {minilm / 'tokenizer.json'} is not a tokenizer the tokenizers library can read")
    assert "serving" not in run.stdout
