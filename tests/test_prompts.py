"""Prompt choice per request (server/prompts.py)."""

from __future__ import annotations

import pytest

from compat.inputs import InvalidInputError
from server.prompts import apply_prompt, resolve_prompt

QWEN = {"query": "Instruct: find\nQuery:", "document": ""}


@pytest.mark.parametrize("prompt_name,input_type,default,expected", [
    (None, None, None, ""),
    (None, None, "query", QWEN["query"]),
    ("query", None, None, QWEN["query"]),
    (None, "query", None, QWEN["query"]),
    (None, "search_query", None, QWEN["query"]),  # Cohere's name
    (None, "passage", "query", ""),  # NVIDIA's name for documents; overrides the default
    ("query", "query", None, QWEN["query"]),
])
def test_resolve(prompt_name, input_type, default, expected):
    assert resolve_prompt(QWEN, default, prompt_name, input_type) == expected


@pytest.mark.parametrize("prompt_name,input_type,param", [
    ("nope", None, "prompt_name"),
    (None, "clustering", "input_type"),
    ("query", "document", "prompt_name"),
])
def test_unknown_or_conflicting_names_are_400s(prompt_name, input_type, param):
    with pytest.raises(InvalidInputError) as info:
        resolve_prompt(QWEN, None, prompt_name, input_type)
    assert info.value.param == param


def test_models_without_prompts_accept_input_type_only():
    assert resolve_prompt({}, None, None, "query") == ""
    with pytest.raises(InvalidInputError):
        resolve_prompt({}, None, "query", None)


def test_apply_prepends():
    assert apply_prompt("q: ", ["a", "b"]) == ["q: a", "q: b"]
    assert apply_prompt("", ["a"]) == ["a"]
