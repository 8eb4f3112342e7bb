"""The API tests' app: a fake engine (tests/support/fake_engine.py) served in process.

A module that needs another engine (other dimensions, prompts, a reranker) overrides `fake`;
`client` then serves that one. The CLIP modules share `clip_saved`, a tiny CLIP checkpoint."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from litestar.testing import TestClient
from tokenizers import Tokenizer

from tests.support.fake_engine import FakeEngine, serve


@pytest.fixture(scope="module")
def fake() -> FakeEngine:
    return FakeEngine()


@pytest.fixture(scope="module")
def client(fake: FakeEngine) -> Iterator[TestClient]:
    with serve(fake) as client:
        yield client


@pytest.fixture(scope="module")
def untruncated(fake: FakeEngine) -> Tokenizer:
    """The fake's tokenizer without its cut at the model's limit: what a long input really holds."""
    tokenizer = Tokenizer.from_file(str(fake.spec.path / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


@pytest.fixture(scope="module")
def clip_saved(tmp_path_factory):
    """(folder, model): a tiny CLIP model saved by transformers (tests/support/clip_checkpoints.py), the model
    kept as the reference."""
    from tests.support.clip_checkpoints import save_clip

    path = tmp_path_factory.mktemp("clip")
    return path, save_clip(path)
