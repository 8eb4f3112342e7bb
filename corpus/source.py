"""Reading a corpus: a JSONL or Parquet file of texts (and optional ids), cut into chunks.

A chunk is a fixed number of consecutive rows (the last one may be shorter), numbered from
0, so a restarted job cuts the same file into the same chunks and can skip the finished ones.
With `is_documents`, each row's field holds a document as the list of its chunks (strings,
in order) rather than one text: what late chunking embeds (engine/text/late_chunking.py). The
word "chunk" alone means the rows; a document's pieces are "its chunks".
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import msgspec

from rose_embed.corpus.optional import require

INPUT_FORMATS = ("jsonl", "parquet")
_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".pq": "parquet"}
_READ_ROWS = 4096  # rows per read from the file, before they are regrouped into chunks
# What reading a file raises by itself: a .gz file that is no gzip (OSError), one cut short
# (EOFError) or damaged (zlib.error), a failing disk. The user gets one line, not a traceback.
_READ_ERRORS = (OSError, EOFError, zlib.error)


class CorpusInputError(ValueError):
    """The input file cannot be read as asked (format, a missing field, a non-string text)."""


@dataclass(frozen=True)
class Chunk:
    """Rows [first_row, first_row + len(texts)) of the input."""

    index: int
    first_row: int
    texts: list  # list[str], or per row a document's chunks (list[list[str]])
    ids: list[Any] | None

    def __len__(self) -> int:
        return len(self.texts)

    @cached_property
    def digest(self) -> bytes:
        """What the chunk holds, so that a restart can tell whether the input changed under it."""
        return hashlib.sha256(msgspec.json.encode([self.texts, self.ids])).digest()


def input_format_of(path: Path) -> str:
    suffixes = path.suffixes[-2:] if path.suffix == ".gz" else path.suffixes[-1:]
    fmt = _SUFFIXES.get(suffixes[0].lower()) if suffixes else None
    if fmt is None or (fmt == "parquet" and path.suffix == ".gz"):  # Parquet compresses inside the file
        raise CorpusInputError(f"cannot tell the format of {path.name}: name it .jsonl or .parquet, "
                               "or pass --input-format")
    return fmt


def _documents_problem(value: Any) -> str | None:
    """Why a row's value is not a document as its chunks (a non-empty list of non-empty strings)."""
    if not isinstance(value, list):
        return "a document's chunks must be a list of strings, not " + (
            "null" if value is None else type(value).__name__)
    if not value:
        return "a document needs at least one chunk"
    for j, chunk in enumerate(value):
        if not isinstance(chunk, str) or not chunk:
            what = "an empty string" if chunk == "" else "null" if chunk is None else type(chunk).__name__
            return f"its chunk {j} is {what}, not a text"
    return None


class JsonlSource:
    """One JSON object per line (blank lines skipped); plain or gzip-compressed (.gz)."""

    def __init__(self, path: Path, text_field: str, id_field: str | None, is_documents: bool = False):
        self.path, self.text_field, self.id_field, self.is_documents = path, text_field, id_field, is_documents
        self._decoder = msgspec.json.Decoder()

    def _open(self):
        return gzip.open(self.path, "rb") if self.path.suffix == ".gz" else self.path.open("rb")

    def _unreadable(self, exc: Exception, line_number: int) -> CorpusInputError:
        return CorpusInputError(f"{self.path.name}: cannot be read past line {line_number} ({exc})")

    def _lines(self) -> Iterator[tuple[int, bytes]]:
        """(line number from 1, line); a file that fails to read raises CorpusInputError."""
        line_number = 0
        try:
            with self._open() as f:
                for line_number, line in enumerate(f, 1):
                    yield line_number, line
        except _READ_ERRORS as exc:
            raise self._unreadable(exc, line_number) from None

    def estimate_rows(self) -> int:
        """Lines in the file, counted without parsing them (the progress bar's total)."""
        count, last = 0, b"\n"
        try:
            with self._open() as f:
                while block := f.read(1 << 24):
                    count += block.count(b"\n")
                    last = block[-1:]
        except _READ_ERRORS as exc:
            raise self._unreadable(exc, count) from None
        return count + (last != b"\n")

    def batches(self) -> Iterator[tuple[list[str], list[Any] | None]]:
        texts: list[str] = []
        ids: list[Any] | None = [] if self.id_field else None
        for line_number, line in self._lines():
            if not line.strip():
                continue
            try:
                record = self._decoder.decode(line)
            except msgspec.DecodeError as exc:
                raise CorpusInputError(f"{self.path.name} line {line_number}: not JSON ({exc})") from None
            text, row_id = self._fields(record, line_number)
            texts.append(text)
            if ids is not None:
                ids.append(row_id)
            if len(texts) == _READ_ROWS:
                yield texts, ids
                texts, ids = [], ([] if self.id_field else None)
        if texts:
            yield texts, ids

    def _fields(self, record: Any, line_number: int) -> tuple[str, Any]:
        where = f"{self.path.name} line {line_number}"
        if not isinstance(record, dict):
            raise CorpusInputError(f"{where}: expected a JSON object")
        text = record.get(self.text_field)
        if self.is_documents:
            problem = f"has no {self.text_field!r} field" if text is None else _documents_problem(text)
            if problem is not None:
                raise CorpusInputError(f"{where}: {self.text_field!r}: {problem} (see --chunks-field)")
        elif not isinstance(text, str):
            problem = "has no" if self.text_field not in record else "has a non-string"
            raise CorpusInputError(f"{where} {problem} {self.text_field!r} field (see --text-field)")
        if self.id_field is not None and self.id_field not in record:
            raise CorpusInputError(f"{where} has no {self.id_field!r} field (see --id-field)")
        return text, record.get(self.id_field) if self.id_field else None


class ParquetSource:
    """A Parquet file with a string column of texts, or a list<string> column of documents'
    chunks (needs pyarrow: the `corpus` extra)."""

    def __init__(self, path: Path, text_field: str, id_field: str | None, is_documents: bool = False):
        import pyarrow.parquet as pq

        self.path, self.text_field, self.id_field, self.is_documents = path, text_field, id_field, is_documents
        try:
            self._file = pq.ParquetFile(path)
        except (ValueError, OSError) as exc:  # pyarrow's ArrowInvalid is a ValueError: not Parquet, or cut short
            raise CorpusInputError(f"{path.name}: cannot be read as Parquet ({exc})") from None
        names = self._file.schema_arrow.names
        for field, flag in ((text_field, "--chunks-field" if is_documents else "--text-field"),
                            (id_field, "--id-field")):
            if field is not None and field not in names:
                raise CorpusInputError(f"{path.name} has no column {field!r} (see {flag}; columns: {names})")

    def estimate_rows(self) -> int:
        return self._file.metadata.num_rows

    def batches(self) -> Iterator[tuple[list[str], list[Any] | None]]:
        columns = [self.text_field] + ([self.id_field] if self.id_field else [])
        first_row = 0
        for batch in self._file.iter_batches(batch_size=_READ_ROWS, columns=columns):
            texts = batch.column(self.text_field).to_pylist()
            for i, text in enumerate(texts):
                if self.is_documents:
                    problem = _documents_problem(text)
                    if problem is not None:
                        raise CorpusInputError(f"{self.path.name} row {first_row + i}: {self.text_field!r}: {problem}")
                elif not isinstance(text, str):
                    raise CorpusInputError(f"{self.path.name} row {first_row + i}: {self.text_field!r} "
                                           f"is {'null' if text is None else type(text).__name__}, not a string")
            yield texts, batch.column(self.id_field).to_pylist() if self.id_field else None
            first_row += len(texts)


def open_source(path: Path, input_format: str | None, text_field: str, id_field: str | None,
                is_documents: bool = False):
    """A JsonlSource or ParquetSource for `path` (format from its suffix unless given);
    `is_documents`: `text_field` holds each row's document as the list of its chunks."""
    if path.is_dir():
        raise CorpusInputError(f"{path}: is a directory; give a file")
    if not path.is_file():
        raise CorpusInputError(f"{path}: no such file")
    fmt = input_format or input_format_of(path)
    if fmt == "parquet":
        require("pyarrow", "reading Parquet")
        return ParquetSource(path, text_field, id_field, is_documents)
    return JsonlSource(path, text_field, id_field, is_documents)


def cut_chunks(source, chunk_size: int) -> Iterator[Chunk]:
    """The source's rows regrouped into chunks of exactly `chunk_size` rows (the last: fewer)."""
    texts: list[str] = []
    ids: list[Any] | None = [] if source.id_field else None
    index = first_row = 0
    for batch_texts, batch_ids in source.batches():
        texts += batch_texts
        if ids is not None:
            ids += batch_ids
        while len(texts) >= chunk_size:
            yield Chunk(index, first_row, texts[:chunk_size], ids[:chunk_size] if ids is not None else None)
            texts = texts[chunk_size:]
            ids = ids[chunk_size:] if ids is not None else None
            index, first_row = index + 1, first_row + chunk_size
    if texts:
        yield Chunk(index, first_row, texts, ids)
