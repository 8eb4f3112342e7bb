"""Reading a model's JSON files (config.json, modules.json, the sentence-transformers and
tokenizer configs): a missing file is None, a broken one a ModelLoadError that names it.

The JSON parser's own message names neither the file nor the model, and a model folder holds
several JSON files, so every reader goes through here.
"""

from __future__ import annotations

import json
from pathlib import Path

from rose_embed.engine.model_files.load_error import ModelLoadError

# Python's type of a parsed JSON value -> what JSON calls it, for the message that a file is not an object.
_JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "true or false"}


def read_json(path: Path) -> dict | list | str | int | float | bool | None:
    """The file's JSON value; None where there is no such file."""
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ModelLoadError(f"{path} is not valid JSON (not UTF-8 text at byte {exc.start})") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelLoadError(f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from exc


def read_json_object(path: Path) -> dict | None:
    """The file's JSON object ({...}); None where there is no such file."""
    value = read_json(path)
    if value is None or isinstance(value, dict):
        return value
    raise ModelLoadError(f"{path} is not a JSON object ({{...}}): it holds {_JSON_KINDS.get(type(value), 'something else')}")
