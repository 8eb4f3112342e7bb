"""Chunk files in OUTPUT's parts directory, and the final output assembled from them.

Each finished chunk becomes its own file (`part-000000.npy` or `.parquet`, ids for NumPy
output in `part-000000.ids.json`) written atomically, so a killed job leaves only whole
parts. Once every chunk is done, the parts are joined into OUTPUT in input order: one
NumPy array [N, dim] float32 (ids, if any, in OUTPUT's stem + `.ids.jsonl`, one JSON value
a line), or one Parquet file with a row group per chunk and columns (id field, `embedding`).
For late-chunked documents (`with_chunk_index`) every vector row is one of a document's
chunks: its document's id repeats for each, and Parquet has a column `chunk` too (the chunk's
index in its document).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from rose_embed.corpus.atomic import sync_dir, write_atomic

OUTPUT_FORMATS = ("parquet", "npy")
EMBEDDING_COLUMN = "embedding"
CHUNK_COLUMN = "chunk"


def output_format_of(path: Path) -> str:
    fmt = {".parquet": "parquet", ".pq": "parquet", ".npy": "npy"}.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"cannot tell the output format of {path.name}: name it .parquet or .npy, or pass --format")
    return fmt


def parts_dir_for(output: Path) -> Path:
    return output.with_name(output.name + ".parts")


def ids_path_for(output: Path) -> Path:
    """NumPy output's id sidecar: vectors.npy -> vectors.ids.jsonl."""
    return output.with_suffix(".ids.jsonl")


class PartStore:
    """The parts directory of one output."""

    def __init__(self, output: Path, output_format: str, id_field: str | None, with_chunk_index: bool = False):
        self.output, self.format, self.id_field = output, output_format, id_field
        self.with_chunk_index = with_chunk_index
        self.dir = parts_dir_for(output)

    def _part(self, index: int, suffix: str) -> Path:
        return self.dir / f"part-{index:06d}{suffix}"

    def reset(self) -> None:
        """Start from nothing: remove every part and the manifest."""
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)

    def write(self, index: int, vectors: np.ndarray, ids: list[Any] | None,
              num_chunks: list[int] | None = None) -> None:
        """Write one chunk's vectors [n, dim] float32 (and ids) as whole files; `num_chunks`:
        per row, its document's chunks, which the vectors are (with_chunk_index)."""
        chunk_index = None
        if num_chunks is not None:
            if ids is not None:
                ids = [row_id for row_id, count in zip(ids, num_chunks) for _ in range(count)]
            chunk_index = np.concatenate([np.arange(n, dtype=np.int32) for n in num_chunks]) if num_chunks else \
                np.zeros(0, np.int32)
        if self.format == "npy":
            if ids is not None:
                write_atomic(self._part(index, ".ids.json"), lambda f: f.write(msgspec.json.encode(ids)))
            write_atomic(self._part(index, ".npy"), lambda f: np.save(f, vectors, allow_pickle=False))
            return
        import pyarrow.parquet as pq

        table = _arrow_table(vectors, self.id_field, ids, chunk_index)
        write_atomic(self._part(index, ".parquet"), lambda f: pq.write_table(table, f, use_dictionary=False))

    def assemble(self, num_chunks: int, dimensions: int) -> None:
        """Join parts 0..num_chunks-1 into the output (replaced atomically)."""
        if self.format == "npy":
            self._assemble_npy(num_chunks, dimensions)
        else:
            self._assemble_parquet(num_chunks, dimensions)

    def _assemble_npy(self, num_chunks: int, dimensions: int) -> None:
        # mmap_mode: a part is paged in once, while it is copied, not held in memory.
        arrays = [np.load(self._part(i, ".npy"), mmap_mode="r") for i in range(num_chunks)]
        if self.id_field is not None:
            def write_ids(f) -> None:
                encoder = msgspec.json.Encoder()
                for i in range(num_chunks):
                    for row_id in msgspec.json.decode(self._part(i, ".ids.json").read_bytes()):
                        f.write(encoder.encode(row_id) + b"\n")
            write_atomic(ids_path_for(self.output), write_ids)
        else:
            ids_path_for(self.output).unlink(missing_ok=True)  # an earlier run's ids would not match
        tmp = self.output.with_name(f".{self.output.name}.tmp-{os.getpid()}")
        try:
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32,
                                            shape=(sum(len(a) for a in arrays), dimensions))
            row = 0
            for array in arrays:
                out[row:row + len(array)] = array
                row += len(array)
            out.flush()
            del out
            with tmp.open("rb+") as f:
                os.fsync(f.fileno())
            os.replace(tmp, self.output)
        finally:
            tmp.unlink(missing_ok=True)
        sync_dir(self.output.parent)

    def _assemble_parquet(self, num_chunks: int, dimensions: int) -> None:
        import pyarrow.parquet as pq

        tables = (pq.read_table(self._part(i, ".parquet")) for i in range(num_chunks))
        first = pq.read_schema(self._part(0, ".parquet")) if num_chunks else _arrow_table(
            np.zeros((0, dimensions), np.float32), self.id_field, [] if self.id_field else None,
            np.zeros(0, np.int32) if self.with_chunk_index else None).schema

        def write(f) -> None:
            with pq.ParquetWriter(f, first, use_dictionary=False) as writer:
                for i, table in enumerate(tables):
                    if not table.schema.equals(first):
                        raise ValueError(f"chunk {i}'s ids are of another type than chunk 0's "
                                         f"({table.schema.field(0).type} vs {first.field(0).type})")
                    writer.write_table(table)  # one row group per chunk
        write_atomic(self.output, write)

    def remove(self) -> None:
        shutil.rmtree(self.dir)


def _arrow_table(vectors: np.ndarray, id_field: str | None, ids: list[Any] | None,
                 chunk_index: np.ndarray | None = None):
    import pyarrow as pa

    embedding = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), pa.float32()), vectors.shape[1])
    columns = {id_field: pa.array(ids)} if id_field is not None else {}
    if chunk_index is not None:
        columns[CHUNK_COLUMN] = pa.array(chunk_index, pa.int32())
    return pa.table({**columns, EMBEDDING_COLUMN: embedding})
