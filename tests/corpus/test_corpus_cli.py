"""`rose-embed embed`: JSONL and Parquet in, Parquet and NumPy out, the server's vectors."""

from __future__ import annotations

import io
import json
import sys

import numpy as np
import pytest

from rose_embed.server.cli.main import main
from tests.support.corpus_support import (assert_same_vectors, corpus_rows, read_parquet_output, server_vectors,
                                  write_jsonl)


@pytest.fixture(scope="module")
def rows(texts) -> list[dict]:
    return corpus_rows(texts, num_short=140, num_long=10)


@pytest.fixture(scope="module")
def reference(server, rows) -> np.ndarray:
    return server_vectors(server.url, [r["text"] for r in rows])


@pytest.fixture(scope="module")
def parquet_output(tmp_path_factory, rows):
    """JSONL -> Parquet through the CLI, in chunks of 64 rows (the last one shorter)."""
    work = tmp_path_factory.mktemp("cli")
    source = write_jsonl(work / "corpus.jsonl", rows)
    output = work / "vectors.parquet"
    main(["embed", str(source), "-o", str(output), "--dtype", "float32", "--id-field", "id", "--chunk-size", "64",
          "--max-batch-tokens", "4096", "--quiet"])
    return output


def test_jsonl_to_parquet_gives_the_servers_vectors(parquet_output, rows, reference):
    import pyarrow.parquet as pq

    ids, vectors = read_parquet_output(parquet_output)
    assert ids == [r["id"] for r in rows]  # every row, in input order, its id carried through
    assert_same_vectors(vectors, reference)
    assert pq.ParquetFile(parquet_output).metadata.num_row_groups == 3  # one per chunk: 64 + 64 + 22
    assert not parquet_output.with_name(parquet_output.name + ".parts").exists()  # cleaned up when done


@pytest.mark.slow  # the CLI loads the real model
def test_parquet_to_npy_equals_jsonl_to_parquet(tmp_path, rows, parquet_output):
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"body": [r["text"] for r in rows], "key": list(range(len(rows)))}), source,
                   row_group_size=50)  # row groups that do not line up with chunks
    output = tmp_path / "vectors.npy"
    main(["embed", str(source), "-o", str(output), "--dtype", "float32", "--text-field", "body", "--id-field", "key",
          "--chunk-size", "96", "--quiet"])
    vectors = np.load(output)
    assert vectors.dtype == np.float32
    _, expected = read_parquet_output(parquet_output)
    np.testing.assert_allclose(vectors, expected, atol=1e-5)
    ids = [json.loads(line) for line in (tmp_path / "vectors.ids.jsonl").read_text().splitlines()]
    assert ids == list(range(len(rows)))  # integer ids stay integers


def test_bad_input_and_an_existing_output_fail_before_the_model_loads(tmp_path, monkeypatch):
    from rose_embed.corpus import engine_setup

    monkeypatch.setattr(engine_setup, "build_engine", lambda **_: pytest.fail("the model was loaded"))
    source = write_jsonl(tmp_path / "corpus.jsonl", [{"text": "a"}, {"body": "b"}])
    cases = [
        (["--text-field", "body"], "line 1 has no 'body' field"),
        (["--id-field", "id"], "line 1 has no 'id' field"),
        ([], "line 2 has no 'text' field"),
    ]
    for flags, message in cases:
        with pytest.raises(SystemExit) as exc:
            main(["embed", str(source), "-o", str(tmp_path / "v.npy"), *flags])
        assert message in str(exc.value)
    good = write_jsonl(tmp_path / "good.jsonl", [{"text": "a"}])
    (tmp_path / "v.npy").write_bytes(b"")
    with pytest.raises(SystemExit, match="v.npy exists; pass --overwrite"):
        main(["embed", str(good), "-o", str(tmp_path / "v.npy")])
    with pytest.raises(SystemExit, match="cannot tell the output format"):
        main(["embed", str(good), "-o", str(tmp_path / "v.csv")])
    with pytest.raises(SystemExit, match="cannot tell the format of good.txt"):
        main(["embed", str(good.rename(tmp_path / "good.txt")), "-o", str(tmp_path / "w.npy")])


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_shows_rate_and_eta_on_a_terminal_only():
    from rose_embed.corpus.progress import progress_bar

    terminal = _Terminal()
    bar = progress_bar(lambda: 1000, resumed=200, quiet=False, stream=terminal)
    bar.update(300)
    bar.refresh()
    bar.close()
    drawn = terminal.getvalue()
    assert "500/1000" in drawn and "texts/s" in drawn and "<" in drawn  # count, rate, elapsed<remaining
    for stream, quiet in ((io.StringIO(), False), (_Terminal(), True)):  # a pipe or a file; --quiet
        bar = progress_bar(lambda: pytest.fail("counted rows for a bar nobody sees"), 0, quiet, stream)
        bar.update(10)
        bar.close()
        assert stream.getvalue() == ""


@pytest.mark.parametrize("source_name, output_name, purpose", [
    ("corpus.jsonl", "vectors.parquet", "writing Parquet"),
    ("corpus.parquet", "vectors.npy", "reading Parquet"),
])
def test_a_missing_pyarrow_is_named_before_the_model_loads(tmp_path, monkeypatch, capsys, source_name, output_name,
                                                           purpose):
    import sys

    from rose_embed.corpus import engine_setup

    source = tmp_path / source_name
    if source.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"text": ["a", "b"]}), source)
    else:
        write_jsonl(source, [{"text": "a"}])
    monkeypatch.setattr(engine_setup, "build_engine", lambda **_: pytest.fail("the model was loaded"))
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if it were not installed
    with pytest.raises(SystemExit) as exc:
        main(["embed", str(source), "-o", str(tmp_path / output_name)])
    assert str(exc.value) == (f"rose-embed embed: {purpose} needs pyarrow, which is not installed: pip install "
                              "pyarrow (or the corpus extra: pip install -e '.[corpus]' in a clone of rose-embed)")
    assert not (tmp_path / (output_name + ".parts")).exists()


def test_the_progress_bar_moves_with_every_batch(tmp_path, monkeypatch, default_engine):
    """500 rows in one chunk (the default chunk is 10,000 rows), 32 texts a batch."""
    from dataclasses import replace

    from rose_embed.corpus import job
    from rose_embed.corpus.job import CorpusJob, run_job
    from rose_embed.corpus.progress import progress_bar

    monkeypatch.setattr(default_engine, "config", replace(default_engine.config, max_batch_seqs=32))
    terminal, updates = _Terminal(), []

    def recorded_bar(count_total, resumed, quiet):
        bar = progress_bar(count_total, resumed, quiet, stream=terminal)
        real_update = bar.update
        bar.update = lambda n=1: (updates.append(n), real_update(n))[1]
        return bar

    monkeypatch.setattr(job, "progress_bar", recorded_bar)
    source = write_jsonl(tmp_path / "corpus.jsonl", [{"text": f"row {i}"} for i in range(500)])
    run_job(default_engine, CorpusJob(input=source, output=tmp_path / "v.npy", output_format="npy"))
    assert sum(updates) == 500 and len(updates) >= 500 // 32 and max(updates) <= 32
    drawn = terminal.getvalue()
    assert "500/500" in drawn and "texts/s" in drawn


def _interrupted(tmp_path, monkeypatch, capsys, default_engine, after_texts: int) -> str:
    """Run the CLI on 150 rows in chunks of 50, 16 a batch; Ctrl-C lands once `after_texts` texts were sent."""
    from rose_embed.corpus import engine_setup

    from dataclasses import replace

    sent = [0]
    real = type(default_engine).execute_packed.__get__(default_engine)

    def execute_packed(batch):
        if sent[0] >= after_texts:
            raise KeyboardInterrupt
        sent[0] += batch.num_seqs
        return real(batch)

    monkeypatch.setattr(default_engine, "execute_packed", execute_packed)
    monkeypatch.setattr(default_engine, "config", replace(default_engine.config, max_batch_seqs=16))
    monkeypatch.setattr(engine_setup, "build_engine", lambda **_: default_engine)
    tmp_path.mkdir()
    source = write_jsonl(tmp_path / "corpus.jsonl", [{"text": f"text {i}"} for i in range(150)])
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # main silences the interrupt's traceback
    with pytest.raises(KeyboardInterrupt):  # left uncaught, so that Python ends the process by SIGINT
        main(["embed", str(source), "-o", str(tmp_path / "v.npy"), "--chunk-size", "50", "--quiet"])
    said = capsys.readouterr().err.strip()
    sys.excepthook(KeyboardInterrupt, KeyboardInterrupt(), None)
    assert capsys.readouterr().err == ""
    sys.excepthook(ValueError, ValueError("other errors still show"), None)
    assert "other errors still show" in capsys.readouterr().err
    return said


def test_the_interrupt_message_says_what_is_on_disk(tmp_path, monkeypatch, capsys, default_engine):
    from rose_embed.corpus.manifest import load_manifest

    nothing = _interrupted(tmp_path / "a", monkeypatch, capsys, default_engine, after_texts=0)
    assert nothing == "rose-embed embed: interrupted; no chunk was finished, so nothing was kept"
    message = _interrupted(tmp_path / "b", monkeypatch, capsys, default_engine, after_texts=120)
    parts = tmp_path / "b" / "v.npy.parts"
    manifest = load_manifest(parts)
    assert manifest.num_chunks_done >= 1
    assert len(list(parts.glob("part-*.npy"))) == manifest.num_chunks_done
    assert message == (f"rose-embed embed: interrupted; {manifest.num_chunks_done} finished chunks "
                       f"({manifest.num_rows_done} texts) are kept in {parts}/; run the same command to continue")
