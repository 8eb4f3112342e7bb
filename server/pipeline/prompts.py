"""Which prompt (instruction prefix) a request's texts get.

Models list their prompts in config_sentence_transformers.json, e.g. Qwen3-Embedding:
{"query": "Instruct: Given a web search query, retrieve relevant passages that answer
the query\\nQuery:", "document": ""}. A request picks one by `prompt_name` (the
sentence-transformers name) or `input_type` (the name Voyage, Cohere and NVIDIA clients
send; "search_query" / "search_document" / "passage" are read as "query" / "document"
when the model has no prompt of that exact name; for a model without any prompts,
`input_type` is accepted and changes nothing). Without either, the server's default
applies: --default-prompt-name, else the model's `default_prompt_name`, else none. The
prompt is prepended to the text before tokenizing, as sentence-transformers does, so its
tokens count in `usage`. Token-id inputs are used as they are, without a prompt.
"""

from __future__ import annotations

from rose_embed.compat.inputs import InvalidInputError

_ALIASES = {"search_query": "query", "search_document": "document", "passage": "document"}


def resolve_prompt(prompts: dict[str, str], default_name: str | None,
                   prompt_name: str | None, input_type: str | None) -> str:
    """The prefix for this request's texts ("" for none); a 400 for an unknown name."""
    if prompt_name is not None and input_type is not None and prompt_name != input_type:
        raise InvalidInputError("give either 'prompt_name' or 'input_type', not both", "prompt_name")
    param, name = ("prompt_name", prompt_name) if prompt_name is not None else ("input_type", input_type)
    if name is None:
        return prompts.get(default_name, "") if default_name else ""
    if name not in prompts and _ALIASES.get(name) in prompts:
        name = _ALIASES[name]
    if name not in prompts and param == "input_type" and not prompts:
        return ""  # a model without prompts (pplx-embed) embeds queries and documents alike
    if name not in prompts:
        known = ", ".join(repr(n) for n in prompts) or "none"
        raise InvalidInputError(f"'{param}' {name!r} is not one of this model's prompts ({known})", param)
    return prompts[name]


def task_of(prompt_name: str | None, input_type: str | None) -> str | None:
    """The name a request gives its texts' task, with `input_type`'s aliases read as above ("search_query" is
    "query"): an inference-free sparse encoder takes its query side for "query" (server/pipeline/sparse_ask.py)."""
    name = prompt_name if prompt_name is not None else input_type
    return _ALIASES.get(name, name)


def apply_prompt(prompt: str, texts: list[str]) -> list[str]:
    return [prompt + text for text in texts] if prompt else texts
