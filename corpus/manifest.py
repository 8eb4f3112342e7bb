"""The progress manifest: which chunks are done, and what their vectors were made from.

It lives beside the chunk files in OUTPUT's parts directory and is replaced atomically after
each chunk file is on disk, so whatever it lists is complete. A restart resumes only when
the model, the job's settings and the input (its size, and the contents of the chunks
already done) are what the manifest recorded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from rose_embed.corpus.atomic import write_atomic
from rose_embed.corpus.fingerprint import EMPTY_CHAIN, chain

MANIFEST_NAME = "manifest.json"
_VERSION = 1


class JobMismatchError(RuntimeError):
    """An earlier, unfinished run of this output used another model, input or settings."""


class Manifest(msgspec.Struct, kw_only=True, frozen=True):
    version: int = _VERSION
    input_path: str  # for messages only: a moved input with the same contents still resumes
    input_size: int
    model: dict[str, Any]
    settings: dict[str, Any]  # text/id fields, chunk size, output format
    num_chunks_done: int = 0
    num_rows_done: int = 0
    input_digest: str = EMPTY_CHAIN  # fingerprint.chain over the finished chunks, in order

    def after_chunk(self, num_rows: int, chunk_digest: bytes) -> "Manifest":
        return msgspec.structs.replace(
            self, num_chunks_done=self.num_chunks_done + 1, num_rows_done=self.num_rows_done + num_rows,
            input_digest=chain(self.input_digest, chunk_digest),
        )


def load_manifest(parts_dir: Path) -> Manifest | None:
    path = parts_dir / MANIFEST_NAME
    if not path.is_file():
        return None
    return msgspec.json.decode(path.read_bytes(), type=Manifest)


def save_manifest(parts_dir: Path, manifest: Manifest) -> None:
    write_atomic(parts_dir / MANIFEST_NAME, lambda f: f.write(msgspec.json.format(msgspec.json.encode(manifest))))


def check_resumable(done: Manifest, fresh: Manifest) -> None:
    """Raise JobMismatchError unless `fresh` (this run) may continue what `done` recorded."""
    if done.version != fresh.version:
        raise JobMismatchError(f"the manifest is of format version {done.version}, this is {fresh.version}")
    for what, old, new in (("model", done.model, fresh.model), ("settings", done.settings, fresh.settings)):
        changed = [f"{key} {old.get(key)!r} -> {new.get(key)!r}" for key in sorted(old.keys() | new.keys())
                   if old.get(key) != new.get(key)]
        if changed:
            raise JobMismatchError(f"the {what} changed since the unfinished run ({'; '.join(changed)})")
    if done.input_size != fresh.input_size:
        raise JobMismatchError(f"the input changed since the unfinished run ({done.input_path}: "
                               f"{done.input_size} bytes then, {fresh.input_size} now)")
