"""Reading corpus files: formats, fields, and chunks that a restart cuts the same way."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from rose_embed.corpus.source import CorpusInputError, cut_chunks, open_source


def _rows(n: int) -> list[dict]:
    return [{"id": i, "text": f"text number {i}", "other": [i]} for i in range(n)]


def _jsonl(rows: list[dict]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n\n" for r in rows)  # blank lines are skipped


@pytest.mark.parametrize("name", ["c.jsonl", "c.ndjson", "c.jsonl.gz", "c.parquet"])
def test_every_format_reads_as_the_same_chunks(tmp_path: Path, name: str):
    rows = _rows(10_000)  # more than one read batch (4096 rows), cut into chunks of 3000
    path = tmp_path / name
    if name.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=777)
    else:
        path.write_bytes(gzip.compress(_jsonl(rows)) if name.endswith(".gz") else _jsonl(rows))
    source = open_source(path, None, "text", "id")
    assert source.estimate_rows() >= len(rows)
    chunks = list(cut_chunks(source, 3000))
    assert [(c.index, c.first_row, len(c)) for c in chunks] == [(0, 0, 3000), (1, 3000, 3000), (2, 6000, 3000),
                                                                (3, 9000, 1000)]
    assert [t for c in chunks for t in c.texts] == [r["text"] for r in rows]
    assert [i for c in chunks for i in c.ids] == list(range(len(rows)))
    again = list(cut_chunks(open_source(path, None, "text", "id"), 3000))
    assert [c.digest for c in again] == [c.digest for c in chunks]
    assert len({c.digest for c in chunks}) == len(chunks)


def test_bad_rows_name_their_line_or_row(tmp_path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"text": "fine"}\n{"text": 3}\n')
    with pytest.raises(CorpusInputError, match="line 2 has a non-string 'text' field"):
        list(cut_chunks(open_source(path, None, "text", None), 10))
    path.write_bytes(b'{"text": "fine"}\nnot json\n')
    with pytest.raises(CorpusInputError, match="line 2: not JSON"):
        list(cut_chunks(open_source(path, None, "text", None), 10))
    pq.write_table(pa.table({"text": ["a", None]}), tmp_path / "c.parquet")
    with pytest.raises(CorpusInputError, match="row 1: 'text' is null"):
        list(cut_chunks(open_source(tmp_path / "c.parquet", None, "text", None), 10))
    with pytest.raises(CorpusInputError, match="has no column 'body'"):
        open_source(tmp_path / "c.parquet", None, "body", None)
    (tmp_path / "c.parquet").rename(tmp_path / "c.parquet.gz")
    with pytest.raises(CorpusInputError, match="cannot tell the format"):
        open_source(tmp_path / "c.parquet.gz", None, "text", None)


def test_a_folder_or_a_missing_input_says_which(tmp_path: Path):
    with pytest.raises(CorpusInputError, match=r": is a directory; give a file$"):
        open_source(tmp_path, None, "text", None)
    with pytest.raises(CorpusInputError, match=r"none\.jsonl: no such file$"):
        open_source(tmp_path / "none.jsonl", None, "text", None)


def test_a_gzip_file_that_is_none_or_cut_short_is_one_error_not_a_traceback(tmp_path: Path):
    rows = _rows(20_000)  # past the first read batch, so the cut shows after rows were handed out
    whole = gzip.compress(_jsonl(rows))
    (tmp_path / "cut.jsonl.gz").write_bytes(whole[: len(whole) * 9 // 10])
    (tmp_path / "plain.jsonl.gz").write_bytes(_jsonl(rows[:3]))  # named .gz, never compressed
    for name, why in [("cut.jsonl.gz", "ended before the end-of-stream marker"), ("plain.jsonl.gz", "Not a gzipped file")]:
        source = open_source(tmp_path / name, None, "text", None)
        with pytest.raises(CorpusInputError, match=rf"^{name}: cannot be read past line \d+ \(.*{why}"):
            list(cut_chunks(source, 3000))
        with pytest.raises(CorpusInputError, match=rf"^{name}: cannot be read past line \d+ \(.*{why}"):
            source.estimate_rows()


def test_a_null_text_and_a_file_that_is_no_parquet_say_so_and_name_the_file(tmp_path: Path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"text": "fine"}\n{"text": null}\n')
    with pytest.raises(CorpusInputError, match="^c.jsonl line 2 has a non-string 'text' field"):
        list(cut_chunks(open_source(path, None, "text", None), 10))
    (tmp_path / "c.parquet").write_bytes(b"PAR1 but not Parquet\n")
    with pytest.raises(CorpusInputError, match=r"^c.parquet: cannot be read as Parquet \(.*magic bytes"):
        open_source(tmp_path / "c.parquet", None, "text", None)
