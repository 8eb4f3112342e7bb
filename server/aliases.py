"""Model aliases: extra names a client may send as `model` (e.g. `text-embedding-3-small`).

Clients written for OpenAI hard-code OpenAI's model names, and some (LlamaIndex's
`OpenAIEmbedding`) only accept those; an alias lets them run unchanged against the one
model this server serves.
"""

from __future__ import annotations


class AliasError(ValueError):
    """A `--model-alias` value that cannot be used."""


def parse_alias(value: str) -> tuple[str, str | None]:
    """`ALIAS` or `ALIAS=MODEL` -> (alias, model or None)."""
    alias, sep, target = value.partition("=")
    alias, target = alias.strip(), target.strip()
    if not alias or (sep and not target):
        raise AliasError(f"--model-alias {value!r}: expected ALIAS or ALIAS=MODEL")
    return alias, (target or None)


def resolve_aliases(values: tuple[str, ...], served_name: str) -> tuple[str, ...]:
    """Check every `--model-alias` against the served model; return the alias names.

    One process serves one model, so an alias that points elsewhere is a configuration
    mistake: better a clear exit at start-up than 404s at run time.
    """
    names: list[str] = []
    for value in values:
        alias, target = parse_alias(value)
        if target is not None and target != served_name:
            raise AliasError(
                f"--model-alias {value!r}: this server serves {served_name!r}, not {target!r}"
            )
        if alias != served_name and alias not in names:
            names.append(alias)
    return tuple(names)


def model_names(served_name: str, alias_values: tuple[str, ...]) -> list[str]:
    """Every name a request may use, the served name first (as /v1/models lists them).

    `alias_values` are the `--model-alias` values as given; their targets were checked at start-up.
    """
    names = [served_name]
    for value in alias_values:
        alias, _ = parse_alias(value)
        if alias not in names:
            names.append(alias)
    return names
