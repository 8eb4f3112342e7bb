"""Normalise the forms of `input` and reject malformed ones with a precise message.

Texts and token ids as OpenAI takes them; where the route takes images (/v1/embeddings), an item may
also be an image, in the shape vLLM and Jina accept: `{"type": "image_url", "image_url": {"url": ...}}`
(or `"image_url": "..."`), alone or in an array beside texts."""

from __future__ import annotations

from dataclasses import dataclass

MAX_INPUTS = 2048


class InvalidInputError(ValueError):
    """A request field is malformed; `param` names it as OpenAI does."""

    def __init__(self, message: str, param: str = "input"):
        super().__init__(message)
        self.param = param


IMAGE_ITEM = '{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}'


@dataclass(frozen=True)
class ImageInput:
    """An image input, as sent: the URL that holds it (a data: URI, or an http(s) URL the front end fetches;
    the front end decodes either)."""

    url: str


@dataclass(frozen=True)
class NormalisedInput:
    """Texts, token-id sequences, or (where any input is an image) `items`: texts and images in the order
    sent; only one of the three."""

    texts: list[str] | None = None
    token_ids: list[list[int]] | None = None
    items: list[str | ImageInput] | None = None

    def __len__(self) -> int:
        if self.items is not None:
            return len(self.items)
        return len(self.texts if self.texts is not None else self.token_ids)

    @property
    def images(self) -> list[tuple[int, ImageInput]]:
        """Each image with its place in `input`."""
        return [(i, item) for i, item in enumerate(self.items or ()) if isinstance(item, ImageInput)]


def _are_tokens(values: list) -> bool:
    """Every item an int. JSON true/false decode to bool, which isinstance counts as int, so the
    exact type is compared; the types are gathered in C, since a body may hold millions of ids
    and a check per id in Python would hold the event loop for seconds."""
    return set(map(type, values)) <= {int}


def normalise_input(value: object, max_inputs: int = MAX_INPUTS, allow_images: bool = False) -> NormalisedInput:
    """str | list[str] | list[int] | list[list[int]] -> NormalisedInput; with `allow_images`, an image
    item, or an array of texts and image items, too."""
    if isinstance(value, str):
        return NormalisedInput(texts=[value])
    if allow_images and isinstance(value, dict):
        return NormalisedInput(items=[_image_item(value, "input")])
    if not isinstance(value, list):
        raise InvalidInputError(
            "'input' must be a string, an array of strings, an array of token ids or an array of "
            f"token-id arrays; got {type(value).__name__ if value is not None else 'null'}"
        )
    if not value:
        raise InvalidInputError("'input' must not be an empty array")
    # A flat array of token ids is one input, however many ids it holds (the model truncates it).
    if _are_tokens(value):
        return NormalisedInput(token_ids=[value])
    if len(value) > max_inputs:
        raise InvalidInputError(f"'input' holds {len(value)} items; at most {max_inputs} are allowed per request")
    if all(isinstance(v, str) for v in value):
        return NormalisedInput(texts=value)
    if all(isinstance(v, list) for v in value):
        for i, ids in enumerate(value):
            if not ids:
                raise InvalidInputError(f"'input[{i}]' is an empty token array; every input needs at least one token")
            if not _are_tokens(ids):
                raise InvalidInputError(f"'input[{i}]' must be an array of integer token ids")
        return NormalisedInput(token_ids=value)
    if allow_images and any(isinstance(v, dict) for v in value):
        items = []
        for i, item in enumerate(value):
            if not isinstance(item, (str, dict)):
                raise InvalidInputError(f"'input[{i}]' must be a string or an image item {IMAGE_ITEM}; an array "
                                        f"that holds images holds texts and images only")
            items.append(item if isinstance(item, str) else _image_item(item, f"input[{i}]"))
        return NormalisedInput(items=items)
    raise InvalidInputError(
        "'input' mixes types: use all strings, all token ids, or all token-id arrays"
    )


def _image_item(item: dict, where: str) -> ImageInput:
    """An image item's URL; InvalidInputError naming `where` for any other object."""
    kind, image = item.get("type", "image_url"), item.get("image_url")
    if isinstance(image, dict):
        image = image.get("url")
    if kind != "image_url" or not isinstance(image, str) or not image:
        raise InvalidInputError(f"'{where}' is an object but no image item: an image is {IMAGE_ITEM}")
    return ImageInput(image)


def check_token_range(token_ids: list[list[int]], vocab_size: int) -> None:
    """Every id must index the model's vocabulary."""
    for i, ids in enumerate(token_ids):
        low, high = min(ids), max(ids)
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            raise InvalidInputError(
                f"'input[{i}]' holds token id {bad}, outside this model's vocabulary [0, {vocab_size}); "
                "token ids must come from the served model's own tokenizer (send text instead)"
            )
