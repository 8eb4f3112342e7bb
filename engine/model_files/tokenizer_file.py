"""Reading a model's tokenizer.json: a file the tokenizers library cannot read is a ModelLoadError
that names it (the library raises a bare Exception that names neither the file nor the model)."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

from rose_embed.engine.model_files.load_error import ModelLoadError


def read_tokenizer(path: Path) -> Tokenizer:
    """The tokenizers library's tokenizer from `path`."""
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:
        raise ModelLoadError(f"{path} is not a tokenizer the tokenizers library can read: {exc}") from exc
