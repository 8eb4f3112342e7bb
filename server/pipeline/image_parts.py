"""The parts of a request that holds images (a CLIP model's /v1/embeddings), texts beside them in order.

Each image is decoded and preprocessed here, in the front end (engine/image/: the data: URI within its
byte and pixel limits, then the checkpoint's resize, crop and normalisation), in the tokenizer threads,
off the event loop: Pillow's decoders and resizes release the GIL. An image given as an http(s) URL is
fetched first, on the event loop, a part's URLs at once (image_fetch.py: its limits and the addresses it
refuses). Its pixels go to the engine in the
piece (engine/contract/batch.py's pack_images), each image a sequence of as many tokens as the vision
tower reads, so that the queue counts, cuts and shares images by token volume as it does texts, and
`usage` counts them. A run of consecutive texts is made ready as any texts are (embed_parts.py); the
answers keep the request's order. An image that cannot be used is a 400 naming its index and why.
"""

from __future__ import annotations

import asyncio
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
from rose_embed.server.pipeline.image_fetch import ImageFetcher, is_fetched_url
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
    files = await fetch_files(runtime.image_fetcher, images, param)
    pixels = await runtime.tokenizer_pool.run(LARGE if is_large else SMALL, images_to_pixels, files, how, param)
    placeholder = np.full(model.image_seq_len, IMAGE_TOKEN, dtype=np.int32)
    # The engine normalises image vectors as it does texts' (engine/rose/runner.py): nothing to combine.
    return ReadyPart([placeholder] * len(images), finish, pixels=pixels)


async def fetch_files(fetcher: ImageFetcher, images: list[tuple[int, ImageInput]],
                      param: str = "input") -> list[tuple[int, str | bytes]]:
    """Each image as its data: URI, or the file its http(s) URL holds, fetched all at once; a 400 naming
    the first (in the request's order) that cannot be fetched."""
    urls = [image.url for _, image in images if is_fetched_url(image.url)]
    if not urls:
        return [(index, image.url) for index, image in images]
    # Every fetch ends (or fails) before a refusal names the first that failed: none is left running.
    done = iter(await asyncio.gather(*map(fetcher.fetch, urls), return_exceptions=True))
    files = []
    for index, image in images:
        file = next(done) if is_fetched_url(image.url) else image.url
        if isinstance(file, ImageInputError):
            raise invalid_request(f"'{param}[{index}]' is not a usable image: {file}", param, "invalid_image")
        if isinstance(file, BaseException):
            raise file
        files.append((index, file))
    return files


def images_to_pixels(images: list[tuple[int, str | bytes]], how: ImagePreprocess, param: str = "input",
                     limits: ImageLimits = IMAGE_LIMITS) -> np.ndarray:
    """The images (each a data: URI or a fetched file) decoded and preprocessed: [N, 3, S, S] float32; a 400
    naming the first that cannot be."""
    pixels = []
    for index, image in images:
        try:
            data = image if isinstance(image, bytes) else decode_data_uri(image, limits)
            pixels.append(preprocess(open_image(data, limits), how))
        except ImageInputError as exc:
            raise invalid_request(f"'{param}[{index}]' is not a usable image: {exc}", param, "invalid_image") from None
    return np.stack(pixels)
