"""What a finished chunk's vectors depend on, recorded so that a restart can refuse to mix
vectors of another model, prompt or input into one output."""

from __future__ import annotations

import hashlib
from pathlib import Path

_SAMPLE_BYTES = 1 << 20
_MODEL_FILES = ("config.json", "tokenizer.json", "sentence_bert_config.json", "modules.json",
                "1_Pooling/config.json", "config_sentence_transformers.json")


def _file_sample_digest(path: Path, digest) -> None:
    """Feed a file's name, size and first and last MiB into `digest`.

    Hashing whole weight files would cost seconds per GB at every start; the size plus the
    first MiB (the safetensors header and the start of the first tensor) and the last MiB
    tell apart any two checkpoints that are not byte-identical in practice.
    """
    size = path.stat().st_size
    digest.update(f"{path.name}\0{size}\0".encode())
    with path.open("rb") as f:
        digest.update(f.read(_SAMPLE_BYTES))
        if size > 2 * _SAMPLE_BYTES:
            f.seek(size - _SAMPLE_BYTES)
            digest.update(f.read(_SAMPLE_BYTES))


def model_fingerprint(spec, dtype: str, prompt: str) -> dict:
    """The model's identity and everything about it that changes its vectors.

    Batch sizes and the device are left out: they move vectors only at rounding level.
    """
    digest = hashlib.sha256()
    weights = sorted(spec.path.glob("*.safetensors")) + sorted(spec.path.glob("pytorch_model*.bin"))
    files = [spec.path / name for name in _MODEL_FILES] + weights
    # The sentence-transformers modules after pooling (Dense, LayerNorm): their settings and weights.
    files += [path for step in spec.head if hasattr(step, "weights")
              for path in (step.weights.parent / "config.json", step.weights)]
    for path in files:
        if path.is_file():
            _file_sample_digest(path, digest)
    return {
        "name": spec.name, "architecture": spec.architecture, "pooling": spec.pooling,
        "normalize": spec.normalize, "is_causal": spec.is_causal, "max_seq_len": spec.max_seq_len,
        "dimensions": spec.embedding_dim, "dtype": dtype, "prompt": prompt, "files_sha256": digest.hexdigest(),
    }


def chain(previous: str, chunk_digest: bytes) -> str:
    """A running digest over the finished chunks' contents, in order (one value, however many
    chunks: the manifest stays small and is rewritten whole after every chunk)."""
    return hashlib.sha256(bytes.fromhex(previous) + chunk_digest).hexdigest()


EMPTY_CHAIN = hashlib.sha256(b"").hexdigest()
