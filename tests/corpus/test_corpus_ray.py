"""The Ray Data recipe on a local Ray (CPU): two actors, each with its own engine, give the
server's vectors for every row, ids and order carried through."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import REPO
from tests.support.corpus_support import assert_same_vectors, corpus_rows, server_vectors

pytestmark = pytest.mark.slow  # a local Ray with a real engine per actor


@pytest.fixture(scope="module")
def local_ray():
    import ray

    # Actors import corpus.ray_embedder by name: they need the repository on their path.
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}})
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


def test_map_batches_gives_the_servers_vectors(local_ray, server, texts):
    from rose_embed.corpus.ray_embedder import RoseEmbedder

    rows = corpus_rows(texts, num_short=60, num_long=4)
    ds = local_ray.data.from_items(rows, override_num_blocks=4)
    ds = ds.map_batches(RoseEmbedder, fn_constructor_kwargs={"max_batch_tokens": 4096, "num_threads": 1, "dtype": "float32"},
                        concurrency=2, num_cpus=1, batch_size=32)
    out = sorted(ds.take_all(), key=lambda row: int(row["id"].removeprefix("doc-")))

    assert [row["id"] for row in out] == [r["id"] for r in rows]
    assert all(row["text"] == r["text"] for row, r in zip(out, rows))  # the other columns pass through
    vectors = np.stack([row["embedding"] for row in out])
    assert vectors.dtype == np.float32
    assert_same_vectors(vectors, server_vectors(server.url, [r["text"] for r in rows]))


def test_the_embedder_alone_handles_numpy_and_pandas_batches(default_engine, monkeypatch):
    import pandas as pd

    from rose_embed.corpus import ray_embedder

    monkeypatch.setattr(ray_embedder, "build_engine", lambda **_: default_engine)
    embedder = ray_embedder.RoseEmbedder(text_column="body", output_column="vec")
    texts = ["first text", "second text"]
    expected = default_engine.embed(texts)
    as_numpy = embedder({"body": np.array(texts, dtype=object), "n": np.arange(2)})
    np.testing.assert_allclose(as_numpy["vec"], expected, atol=1e-6)
    np.testing.assert_array_equal(as_numpy["n"], [0, 1])
    as_pandas = embedder(pd.DataFrame({"body": texts}))
    np.testing.assert_allclose(np.stack(as_pandas["vec"]), expected, atol=1e-6)
    with pytest.raises(TypeError, match="row 1 of this batch is NoneType"):
        embedder({"body": np.array(["fine", None], dtype=object)})
