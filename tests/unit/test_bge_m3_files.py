"""Which files are a BGE-M3 model and what is refused by name (engine/model_files/bge_m3.py), the linears'
shapes read without torch (engine/model_files/torch_file_shapes.py), and how a text's rows become its
lexical weights (engine/contract/m3_rows.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from rose_embed.engine.contract import m3_rows
from rose_embed.engine.model_files.load_error import ModelLoadError
from rose_embed.engine.model_files.loader import load_spec
from rose_embed.engine.model_files.torch_file_shapes import TorchFileError, state_dict_shapes
from tests.support.bge_m3_checkpoints import HIDDEN, save_bge_m3


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return save_bge_m3(tmp_path_factory.mktemp("bge-m3") / "m3", colbert_dim=16)


def _copy(saved: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(saved, tmp_path / "m3"))


def test_its_layout_is_recognised_and_its_sizes_read_from_the_files(saved):
    spec = load_spec(str(saved))
    assert spec.m3 is not None and spec.kind == "embed" and spec.pooling == "cls" and spec.normalize
    assert (spec.m3.dense_dim, spec.m3.colbert_dim) == (HIDDEN, 16)
    assert spec.embedding_dim == HIDDEN + 1  # a row holds the dense vector or a token vector, and a weight
    assert spec.m3.unused_ids == {0, 1, 2, 3}  # <s>, <pad>, </s>, <unk>


def test_without_either_linear_it_is_an_ordinary_embedder(saved, tmp_path):
    path = _copy(saved, tmp_path)
    (path / "colbert_linear.pt").unlink()
    (path / "sparse_linear.pt").unlink()
    assert load_spec(str(path)).m3 is None


@pytest.mark.parametrize("missing", ["colbert_linear.pt", "sparse_linear.pt"])
def test_one_linear_without_the_other_is_refused_by_name(saved, tmp_path, missing):
    path = _copy(saved, tmp_path)
    (path / missing).unlink()
    with pytest.raises(ModelLoadError, match=missing):
        load_spec(str(path))


@pytest.mark.parametrize("file,linear,named", [
    ("sparse_linear.pt", torch.nn.Linear(HIDDEN, 2), "out_features 1"),
    ("colbert_linear.pt", torch.nn.Linear(HIDDEN + 1, HIDDEN), "torch.nn.Linear"),
    ("colbert_linear.pt", torch.nn.Linear(HIDDEN, HIDDEN, bias=False), "torch.nn.Linear"),
])
def test_linears_of_other_shapes_are_refused(saved, tmp_path, file, linear, named):
    path = _copy(saved, tmp_path)
    torch.save(linear.state_dict(), path / file)
    with pytest.raises(ModelLoadError, match=named):
        load_spec(str(path))


def test_a_pickled_module_is_refused_unrun(saved, tmp_path):
    path = _copy(saved, tmp_path)
    torch.save(torch.nn.Linear(HIDDEN, HIDDEN), path / "colbert_linear.pt")
    with pytest.raises(ModelLoadError, match="torch.nn.modules.linear.Linear"):
        load_spec(str(path))


def test_a_dense_side_other_than_cls_and_normalize_is_refused(saved, tmp_path):
    path = _copy(saved, tmp_path)
    pooling = path / "1_Pooling" / "config.json"
    cfg = json.loads(pooling.read_text())
    cfg["pooling_mode"] = "mean"
    pooling.write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match="CLS"):
        load_spec(str(path))


def test_shapes_are_read_from_a_state_dict_and_junk_is_refused(tmp_path):
    torch.save(torch.nn.Linear(8, 3).state_dict(), tmp_path / "linear.pt")
    assert state_dict_shapes(tmp_path / "linear.pt") == {"weight": (3, 8), "bias": (3,)}
    (tmp_path / "junk.pt").write_bytes(b"not a zip")
    with pytest.raises(TorchFileError, match="zip format"):
        state_dict_shapes(tmp_path / "junk.pt")


def test_lexical_weights_keep_each_ids_largest_positive_weight_but_the_unused_ones():
    ids = np.array([0, 7, 5, 7, 9, 5, 3, 2])
    rows = np.zeros((len(ids), 4), np.float32)
    rows[:, -1] = [0.9, 0.2, 0.0, 0.6, -0.1, 0.4, 0.8, 0.7]
    indices, values = m3_rows.lexical_weights(ids, rows, frozenset({0, 1, 2, 3}))
    assert indices.tolist() == [5, 7]
    np.testing.assert_array_equal(values, np.array([0.4, 0.6], np.float32))
    assert [len(a) for a in m3_rows.lexical_weights(ids[:1], rows[:1], frozenset({0}))] == [0, 0]
