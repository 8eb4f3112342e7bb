"""CLIP's vision tower on CUDA in bf16, in CUDA graphs per image count (engine/rose/image_graphs.py),
against transformers' float32 get_image_features on the same device.

A tiny random checkpoint saved by transformers (tests/support/clip_checkpoints.py) at 64x64 pixels in
patches of 8 (65 tokens an image), served with a budget of 1,024 tokens: at most 15 images a batch, so
the image-count buckets are 1, 2, 4, 8 and 15, and a call of more images runs in pieces of 15.

Tolerances (cosine per vector, as tests/gpu/test_gpu.py states them): the bf16 engine against the float32
reference >= 0.999; graphs against --enforce-eager, and an image alone against the same image in a full
batch (other GEMM shapes, so bf16 rounding may differ a little) >= 0.9999.

GPU tests are marked `gpu` and skipped without CUDA.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from rose_embed.engine.contract.config import EngineConfig
from rose_embed.engine.image.preprocess import preprocess
from rose_embed.engine.model_files.loader import load_spec
from rose_embed.engine.rose.engine import Engine
from tests.support.clip_checkpoints import save_clip

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

IMAGE_SIZE, PATCH_SIZE, MAX_BATCH_TOKENS = 64, 8, 1024
BUCKETS = [1, 2, 4, 8, 15]
COUNTS = [1, 3, 15, 35]  # a bucket exactly, padded, the largest, and pieces of 15, 15 and 5
BF16_COSINE, SAME_KERNELS_COSINE = 0.999, 0.9999


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("clip") / "clip"
    return path, save_clip(path, image_size=IMAGE_SIZE, patch_size=PATCH_SIZE)


@pytest.fixture(scope="module")
def pixels(checkpoint) -> np.ndarray:
    rng = np.random.default_rng(0)
    spec = load_spec(str(checkpoint[0]))
    images = [Image.fromarray(rng.integers(0, 256, (int(rng.integers(40, 120)), int(rng.integers(40, 120)), 3),
                                           dtype=np.uint8)) for _ in range(max(COUNTS))]
    return np.stack([preprocess(image, spec.clip.image) for image in images])


def _engine(path, **extra) -> Engine:
    engine = Engine(EngineConfig(model=str(path), device="cuda", dtype="bfloat16", max_batch_tokens=MAX_BATCH_TOKENS,
                                 **extra))
    engine.warm_up()
    return engine


def _reference(model, pixels: np.ndarray) -> np.ndarray:
    model = model.to("cuda")
    with torch.no_grad():
        return model.get_image_features(pixel_values=torch.from_numpy(pixels).to("cuda")).pooler_output.cpu().numpy()


def test_graph_vectors_equal_transformers_and_replay_without_captures(checkpoint, pixels):
    path, model = checkpoint
    engine = _engine(path)
    runner = engine.runner
    assert sorted(runner.image_graphs.graphs) == BUCKETS  # warm-up captured every bucket
    assert runner.num_capture_failures == 0
    replays, eager = runner.num_graph_replays, runner.num_eager_runs
    expected = _reference(model, pixels)
    for count in COUNTS:
        vectors = engine.embed_images(pixels[:count])
        assert vectors.shape == (count, expected.shape[1])
        assert cosines(vectors, expected[:count]).min() >= BF16_COSINE, count
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # 35 images run as 15, 15 and 5 (the first piece's vectors kept from the second's replay): six replays in
    # all, nothing eager, no capture failed.
    assert runner.num_graph_replays - replays == 6
    assert runner.num_eager_runs == eager and runner.num_capture_failures == 0


def test_graphs_equal_enforce_eager_and_padding_changes_nothing(checkpoint, pixels):
    path, _ = checkpoint
    engine = _engine(path)
    graphs = engine.embed_images(pixels[:15])
    eager_engine = _engine(path, enforce_eager=True)
    assert eager_engine.runner.image_graphs is None
    assert cosines(graphs, eager_engine.embed_images(pixels[:15])).min() >= SAME_KERNELS_COSINE
    # Each image alone (bucket 1), and three in bucket 4 padded with what the buffer held: as in the full batch.
    alone = np.concatenate([engine.embed_images(pixels[i: i + 1]) for i in range(3)])
    assert cosines(alone, graphs[:3]).min() >= SAME_KERNELS_COSINE
    assert cosines(engine.embed_images(pixels[:3]), graphs[:3]).min() >= SAME_KERNELS_COSINE
    assert engine.runner.num_capture_failures == 0
