"""The names a client may send as `model`, and which model answers to each.

Clients written for OpenAI hard-code OpenAI's model names: LangChain's `OpenAIEmbeddings()`
sends `text-embedding-ada-002` unless told otherwise, LlamaIndex's `OpenAIEmbedding()` one of
OpenAI's names and nothing else; LlamaIndex's `CohereEmbedding` likewise takes only Cohere's
embedding names (`embed-english-v3.0` unless told otherwise). So the server's first model (the
default one, which also answers a request that names no model) answers OpenAI's and Cohere's
embedding names by default (`--strict-model-names` turns that off); every other model answers
to its own served name, and `--model-alias ALIAS[=MODEL]` adds any other name for any of them.

Whichever name was asked for, a response's `model` is the served model's name: it says which
model really computed the vectors, as OpenAI's answers name the model that served.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from rose_embed.server.http.errors import model_not_found

# OpenAI's embedding models, as their clients name them by default.
OPENAI_EMBEDDING_NAMES = ("text-embedding-ada-002", "text-embedding-3-small", "text-embedding-3-large")
# Cohere's embedding models: the names LlamaIndex's CohereEmbedding accepts, and nothing else.
COHERE_EMBEDDING_NAMES = ("embed-v4.0", "embed-english-v3.0", "embed-english-light-v3.0", "embed-multilingual-v3.0",
                          "embed-multilingual-light-v3.0", "embed-english-v2.0", "embed-english-light-v2.0",
                          "embed-multilingual-v2.0")
VENDOR_EMBEDDING_NAMES = OPENAI_EMBEDDING_NAMES + COHERE_EMBEDDING_NAMES


class AliasError(ValueError):
    """A `--model-alias` value that cannot be used."""


def parse_alias(value: str) -> tuple[str, str | None]:
    """`ALIAS` or `ALIAS=MODEL` -> (alias, model or None)."""
    alias, sep, target = value.partition("=")
    alias, target = alias.strip(), target.strip()
    if not alias or (sep and not target):
        raise AliasError(f"--model-alias {value!r}: expected ALIAS or ALIAS=MODEL")
    return alias, (target or None)


def resolve_aliases(values: tuple[str, ...], served_name: str, others: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Check every `--model-alias` against the served models (`served_name` the first, the default
    one, and `others`); return the alias names.

    An alias that points at no served model, takes a served model's own name or names two
    models is a configuration mistake: better a clear exit at start-up than 404s, or requests
    answered by another model than meant, at run time.
    """
    served = (served_name, *others)
    targets: dict[str, str] = {}  # alias -> the served model it names
    for value in values:
        alias, target = parse_alias(value)
        if target is not None and target not in served:
            raise AliasError(
                f"--model-alias {value!r}: this server serves {', '.join(map(repr, served))}, not {target!r}"
            )
        target = target or served_name
        if alias in served and target != alias:
            raise AliasError(f"--model-alias {value!r}: {alias!r} is a served model's own name")
        if targets.get(alias, target) != target:
            raise AliasError(f"--model-alias {value!r}: {alias!r} already names {targets[alias]!r}; "
                             "an alias names one model")
        if alias not in served:
            targets[alias] = target
    return tuple(targets)


@dataclass(frozen=True)
class ModelNames:
    """Which names each served model answers to: its own and the `--model-alias` ones; the first
    (default) model also to OpenAI's and Cohere's names and to a request that names no model."""

    served: str  # the first model's name
    aliases: tuple[str, ...] = ()  # `--model-alias` names of the first model
    implicit: tuple[str, ...] = ()  # OpenAI's and Cohere's names, answered unless --strict-model-names
    others: tuple[str, ...] = ()  # the other models' names, in order
    other_aliases: tuple[tuple[str, str], ...] = ()  # (alias, the other model's name)

    def resolve(self, asked: str | None) -> str:
        """The served model's name for a request's `model` (None: not given); model_not_found otherwise."""
        if asked is None or asked == self.served or asked in self.aliases or asked in self.implicit:
            return self.served
        if asked in self.others:
            return asked
        for alias, target in self.other_aliases:
            if asked == alias:
                return target
        raise model_not_found(asked, self.listed(), [self.served, *self.others])

    def listed(self) -> list[str]:
        """What /v1/models lists: each model's name followed by the aliases an operator chose for it,
        the first model first.

        OpenAI's and Cohere's names are left out: they are a courtesy to clients that hard-code them,
        not models of their own, and a list of a dozen names for one model would read as a dozen
        models to a user picking one (and to a client that takes the first it is shown).
        """
        names = [self.served, *self.aliases]
        for other in self.others:
            names += [other, *(alias for alias, target in self.other_aliases if target == other)]
        return names


def model_names(served_name: str, alias_values: tuple[str, ...], is_strict: bool = False,
                others: tuple[str, ...] = ()) -> ModelNames:
    """The names of a server whose first (default) model is `served_name` and whose other models
    are `others`; `alias_values` as `--model-alias` gives them.

    The alias targets were checked at start-up (`resolve_aliases`); an alias without a target
    names the first model. OpenAI's and Cohere's names stand for the first model: clients that send
    them (LangChain's, LlamaIndex's defaults) name no model of their choosing.
    """
    return _model_names(served_name, tuple(alias_values), is_strict, tuple(others))


@lru_cache(maxsize=8)  # built once per configuration, then looked up on every request
def _model_names(served_name: str, alias_values: tuple[str, ...], is_strict: bool,
                 others: tuple[str, ...]) -> ModelNames:
    served = (served_name, *others)
    pairs = [(alias, target or served_name) for alias, target in map(parse_alias, alias_values) if alias not in served]
    pairs = list(dict.fromkeys(pairs))
    aliases = tuple(dict.fromkeys(alias for alias, target in pairs if target == served_name))
    other_aliases = tuple((alias, target) for alias, target in pairs if target != served_name)
    taken = {*served, *aliases, *(alias for alias, _ in other_aliases)}
    implicit = () if is_strict else tuple(name for name in VENDOR_EMBEDDING_NAMES if name not in taken)
    return ModelNames(served_name, aliases, implicit, others, other_aliases)
