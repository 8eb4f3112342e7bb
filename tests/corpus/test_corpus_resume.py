"""An interrupted corpus job resumes where it stopped, recomputing nothing that was done,
and refuses to mix in vectors of another input, model or setting."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys

import msgspec
import numpy as np
import pytest

from rose_embed.corpus.job import CorpusJob, run_job
from rose_embed.corpus.manifest import JobMismatchError, load_manifest
from rose_embed.corpus.parts import PartStore, parts_dir_for
from tests.conftest import REPO
from tests.support.corpus_support import assert_same_vectors, corpus_rows, read_parquet_output, write_jsonl

pytestmark = pytest.mark.slow  # corpus jobs on the real model, killed and resumed in processes

CHUNK = 16


class _InjectedFault(RuntimeError):
    pass


class _WatchedEngine:
    """The shared engine, with its executed texts counted and, optionally, a failure injected
    when the `fail_at`-th batch is launched (or another model's spec shown)."""

    def __init__(self, engine, fail_at: int | None = None, spec=None):
        self._engine, self._fail_at = engine, fail_at
        self.spec = spec or engine.spec
        self.batches: list[int] = []

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def execute_packed(self, batch):
        if self._fail_at is not None and len(self.batches) + 1 == self._fail_at:
            raise _InjectedFault("the machine went away")
        self.batches.append(batch.num_seqs)
        return self._engine.execute_packed(batch)

    @property
    def num_texts(self) -> int:
        return sum(self.batches)


@pytest.fixture(scope="module")
def rows(texts) -> list[dict]:
    return corpus_rows(texts, num_short=96, num_long=0)  # 6 chunks of 16


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, default_engine, rows) -> np.ndarray:
    work = tmp_path_factory.mktemp("uninterrupted")
    job = CorpusJob(write_jsonl(work / "corpus.jsonl", rows), work / "vectors.npy", "npy", chunk_size=CHUNK)
    run_job(default_engine, job)
    return np.load(job.output)


def _interrupted_job(tmp_path, default_engine, rows, fail_at: int = 4) -> CorpusJob:
    job = CorpusJob(write_jsonl(tmp_path / "corpus.jsonl", rows), tmp_path / "vectors.npy", "npy",
                    id_field="id", chunk_size=CHUNK)
    with pytest.raises(_InjectedFault):
        run_job(_WatchedEngine(default_engine, fail_at=fail_at), job)
    assert not job.output.exists()
    return job


def test_a_failed_run_resumes_without_recomputing_finished_chunks(tmp_path, default_engine, rows, uninterrupted,
                                                                  monkeypatch):
    job = _interrupted_job(tmp_path, default_engine, rows)
    done = load_manifest(parts_dir_for(job.output))
    assert 1 <= done.num_chunks_done < len(rows) // CHUNK
    assert done.num_rows_done == CHUNK * done.num_chunks_done

    written: list[int] = []
    real_write = PartStore.write
    monkeypatch.setattr(PartStore, "write", lambda self, i, *a: (written.append(i), real_write(self, i, *a)))
    engine = _WatchedEngine(default_engine)
    report = run_job(engine, job)

    assert engine.num_texts == len(rows) - done.num_rows_done  # nothing finished was embedded again
    assert written == list(range(done.num_chunks_done, len(rows) // CHUNK))  # nor written again
    assert (report.num_rows, report.num_resumed) == (len(rows), done.num_rows_done)
    np.testing.assert_array_equal(np.load(job.output), uninterrupted)
    ids = [json.loads(line) for line in (tmp_path / "vectors.ids.jsonl").read_text().splitlines()]
    assert ids == [r["id"] for r in rows]
    assert not parts_dir_for(job.output).exists()


def test_a_changed_input_model_or_setting_is_refused_unless_overwrite(tmp_path, default_engine, rows):
    job = _interrupted_job(tmp_path, default_engine, rows)
    original = job.input.read_bytes()
    # Same size, one letter changed in a row that an earlier chunk embedded.
    edited = original.replace(rows[3]["text"].encode(), rows[3]["text"].swapcase().encode(), 1)
    assert len(edited) == len(original) and edited != original
    job.input.write_bytes(edited)
    with pytest.raises(JobMismatchError, match="its first .* rows, embedded then"):
        run_job(default_engine, job)
    job.input.write_bytes(original + b'{"id": "one-more", "text": "appended"}\n')
    with pytest.raises(JobMismatchError, match="input changed"):
        run_job(default_engine, job)
    job.input.write_bytes(original)

    other_model = _WatchedEngine(default_engine, spec=dataclasses.replace(default_engine.spec, pooling="cls"))
    with pytest.raises(JobMismatchError, match="pooling 'mean' -> 'cls'"):
        run_job(other_model, job)
    with pytest.raises(JobMismatchError, match="prompt '' -> 'query: '"):
        run_job(default_engine, dataclasses.replace(job, prompt="query: "))
    with pytest.raises(JobMismatchError, match="chunk_size 16 -> 32"):
        run_job(default_engine, dataclasses.replace(job, chunk_size=32))
    assert load_manifest(parts_dir_for(job.output)).num_chunks_done >= 1  # refusing kept the work

    engine = _WatchedEngine(default_engine)
    run_job(engine, dataclasses.replace(job, chunk_size=32, overwrite=True))
    assert engine.num_texts == len(rows)  # started over


def test_a_killed_process_resumes_from_its_last_committed_chunk(tmp_path, rows, texts, default_engine):
    """SIGKILL (no cleanup) in the middle of a chunk; the same command then finishes the job."""
    from rose_embed.server.cli.main import main
    from tests.support import corpus_plugins

    source = write_jsonl(tmp_path / "corpus.jsonl", rows)
    output = tmp_path / "vectors.parquet"
    command = ["embed", str(source), "-o", str(output), "--dtype", "float32", "--id-field", "id", "--chunk-size", str(CHUNK),
               "--max-batch-seqs", "8", "--quiet"]  # two batches per chunk
    env = dict(os.environ, ROSE_KILL_AFTER_TEXTS=str(3 * CHUNK + 8),  # dies in chunk 4's second batch
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    killed = subprocess.run([sys.executable, "-m", "rose_embed", *command, "--engine-plugin",
                             "tests.support.corpus_plugins:kill_after"], cwd=REPO, env=env, capture_output=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    assert not output.exists()
    done = load_manifest(parts_dir_for(output))
    assert 1 <= done.num_chunks_done <= 3

    corpus_plugins.executed.clear()
    main([*command, "--engine-plugin", "tests.support.corpus_plugins:count"])
    assert sum(corpus_plugins.executed) == len(rows) - done.num_rows_done
    ids, vectors = read_parquet_output(output)
    assert ids == [r["id"] for r in rows]
    assert_same_vectors(vectors, default_engine.embed([r["text"] for r in rows]))


def test_the_manifest_is_small_and_whole(tmp_path, default_engine, rows):
    job = _interrupted_job(tmp_path, default_engine, rows, fail_at=6)
    path = parts_dir_for(job.output) / "manifest.json"
    manifest = msgspec.json.decode(path.read_bytes())  # parses: it was replaced whole, never appended to
    assert path.stat().st_size < 2000  # one running digest, not a record per chunk
    assert manifest["num_chunks_done"] >= 1 and manifest["model"]["name"] == default_engine.spec.name
    assert not [p for p in path.parent.iterdir() if ".tmp-" in p.name]
