"""The parts of a request that holds images (a CLIP model's /v1/embeddings), texts beside them in order.

Each image is decoded and preprocessed here, in the front end (engine/image/: the data: URI within its
byte and pixel limits, then the checkpoint's resize, crop and normalisation), in the tokenizer threads,
off the event loop: Pillow's decoders and resizes release the GIL. Its pixels go to the engine in the
piece (engine/contract/batch.py's pack_images), each image a sequence of as many tokens as the vision
tower reads, so that the queue counts, cuts and shares images by token volume as it does texts, and
`usage` counts them. A run of consecutive texts is made ready as any texts are (embed_parts.py); the
answers keep the request's order. An image that cannot be used is a 400 naming its index and why.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import partial

import numpy as np

from rose_embed.compat.inputs import ImageInput, NormalisedInput
from rose_embed.engine.contract.batch import IMAGE_TOKEN
from rose_embed.engine.image.decode import ImageInputError, ImageLimits, decode_data_uri, open_image
from rose_embed.engine.image.preprocess import ImagePreprocess, preprocess
from rose_embed.server.http.errors import APIError, invalid_request
from rose_embed.server.pipeline.embed_parts import Finish, PartMaker, text_parts
from rose_embed.server.pipeline.priority_pool import LARGE, SMALL
from rose_embed.server.pipeline.request_pipeline import PART_TEXTS, ReadyPart
from rose_embed.server.pipeline.served_models import ServedModel
from rose_embed.server.pipeline.serving import Serving

IMAGE_LIMITS = ImageLimits()


def check_images(model: ServedModel, inputs: NormalisedInput, param: str = "input",
                 limits: ImageLimits = IMAGE_LIMITS) -> None:
    """Refuse images for a model without a vision tower, naming what it serves, and more images than a
    request may hold; before admission, so that nothing is decoded for a request refused."""
    images = inputs.images
    if not images:
        return
    if not model.takes_images:
        index = images[0][0]
        raise invalid_request(
            f"'{param}[{index}]' is an image, but the model '{model.name}' embeds texts only (it has no vision "
            "tower); send images to a CLIP model (serve one with --model), or send this model texts",
            param, "model_takes_texts_only")
    if len(images) > limits.max_images:
        raise invalid_request(f"'{param}' holds {len(images)} images; at most {limits.max_images} are allowed per "
                              "request", param, "too_many_images")


def mixed_parts(runtime: Serving, model: ServedModel, items: list[str | ImageInput], prompt: str, mode: str,
                finish: Finish, too_long: Callable[[int, int], APIError], is_large: bool,
                param: str = "input") -> list[PartMaker]:
    """The parts of texts and images in the order sent: each run of texts as texts' parts are made (the
    prompt on texts only), each run of images in parts of up to PART_TEXTS images."""
    parts: list[PartMaker] = []
    for is_image, run in itertools.groupby(enumerate(items), key=lambda pair: isinstance(pair[1], ImageInput)):
        run = list(run)
        if is_image:
            parts += image_parts(runtime, model, run, finish, is_large, param)
        else:
            parts += text_parts(runtime, model, [text for _, text in run], prompt, mode, finish, too_long)
    return parts


def image_parts(runtime: Serving, model: ServedModel, images: list[tuple[int, ImageInput]], finish: Finish,
                is_large: bool, param: str = "input") -> list[PartMaker]:
    """`images`: each with its place in the request, which a refusal names."""
    return [partial(_images_part, runtime, model, images[lo: lo + PART_TEXTS], finish, is_large, param)
            for lo in range(0, len(images), PART_TEXTS)]


async def _images_part(runtime: Serving, model: ServedModel, images: list[tuple[int, ImageInput]], finish: Finish,
                       is_large: bool, param: str) -> ReadyPart:
    how = model.view.spec.clip.image
    pixels = await runtime.tokenizer_pool.run(LARGE if is_large else SMALL, images_to_pixels, images, how, param)
    placeholder = np.full(model.image_seq_len, IMAGE_TOKEN, dtype=np.int32)
    # The engine normalises image vectors as it does texts' (engine/rose/runner.py): nothing to combine.
    return ReadyPart([placeholder] * len(images), finish, pixels=pixels)


def images_to_pixels(images: list[tuple[int, ImageInput]], how: ImagePreprocess, param: str = "input",
                     limits: ImageLimits = IMAGE_LIMITS) -> np.ndarray:
    """The images decoded and preprocessed: [N, 3, S, S] float32; a 400 naming the first that cannot be."""
    pixels = []
    for index, image in images:
        try:
            pixels.append(preprocess(open_image(decode_data_uri(image.url, limits), limits), how))
        except ImageInputError as exc:
            raise invalid_request(f"'{param}[{index}]' is not a usable image: {exc}", param, "invalid_image") from None
    return np.stack(pixels)
