"""Checkpoints the GPU test modules share: each is saved once a module that asks for it runs."""

from __future__ import annotations

import pytest

from tests.support.colbert_checkpoints import GPU_QUERY_LENGTH, save_colbert


@pytest.fixture(scope="module")
def colbert(tmp_path_factory):
    """A tiny PyLate ColBERT whose queries expand to GPU_QUERY_LENGTH and documents hold 128 tokens."""
    return save_colbert(tmp_path_factory.mktemp("colbert") / "colbert", query_length=GPU_QUERY_LENGTH,
                        document_length=128)
