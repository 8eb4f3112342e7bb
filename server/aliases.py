"""The names a client may send as `model`, and which model answers to each.

Clients written for OpenAI hard-code OpenAI's model names: LangChain's `OpenAIEmbeddings()`
sends `text-embedding-ada-002` unless told otherwise, LlamaIndex's `OpenAIEmbedding()` one of
OpenAI's names and nothing else. So a server hosting one embedding model answers OpenAI's
embedding names with it by default (`--strict-model-names` turns that off), and
`--model-alias` adds any other name.

Whichever name was asked for, a response's `model` is the served model's name: it says which
model really computed the vectors, as OpenAI's answers name the model that served.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from server.errors import model_not_found

# OpenAI's embedding models, as their clients name them by default.
OPENAI_EMBEDDING_NAMES = ("text-embedding-ada-002", "text-embedding-3-small", "text-embedding-3-large")


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


@dataclass(frozen=True)
class ModelNames:
    """Which names the served model answers to: its own, the `--model-alias` ones, OpenAI's defaults."""

    served: str
    aliases: tuple[str, ...] = ()  # `--model-alias` names, without targets
    implicit: tuple[str, ...] = ()  # OpenAI's names, answered unless --strict-model-names

    def resolve(self, asked: str | None) -> str:
        """The served model's name for a request's `model` (None: not given); model_not_found otherwise."""
        if asked is None or asked == self.served or asked in self.aliases or asked in self.implicit:
            return self.served
        raise model_not_found(asked, self.listed())

    def listed(self) -> list[str]:
        """What /v1/models lists: the served name first, then the aliases an operator chose.

        OpenAI's default names are left out: they are a courtesy to clients that hard-code them,
        not models of their own, and a list of four names for one model would read as four
        models to a user picking one (and to a client that takes the first it is shown).
        """
        return [self.served, *self.aliases]


def model_names(served_name: str, alias_values: tuple[str, ...], is_strict: bool = False) -> ModelNames:
    """The names of a server that hosts one embedding model; `alias_values` as `--model-alias` gives them.

    The alias targets were checked at start-up (`resolve_aliases`). OpenAI's names stand for
    whichever single model is served; with several they would be ambiguous, so a server of
    several models must build its names with `is_strict=True` or choose one per name.
    """
    return _model_names(served_name, tuple(alias_values), is_strict)


@lru_cache(maxsize=8)  # built once per configuration, then looked up on every request
def _model_names(served_name: str, alias_values: tuple[str, ...], is_strict: bool) -> ModelNames:
    aliases = tuple(dict.fromkeys(alias for alias, _ in map(parse_alias, alias_values) if alias != served_name))
    taken = {served_name, *aliases}
    implicit = () if is_strict else tuple(name for name in OPENAI_EMBEDDING_NAMES if name not in taken)
    return ModelNames(served_name, aliases, implicit)
