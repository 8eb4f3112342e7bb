"""One corpus job: an input file embedded into an output file, resumable chunk by chunk."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rose_embed.corpus.fingerprint import EMPTY_CHAIN, chain, model_fingerprint
from rose_embed.corpus.manifest import JobMismatchError, Manifest, check_resumable, load_manifest, save_manifest
from rose_embed.corpus.optional import require
from rose_embed.corpus.parts import PartStore, parts_dir_for
from rose_embed.corpus.progress import progress_bar
from rose_embed.corpus.source import Chunk, cut_chunks, open_source
from rose_embed.engine.text.late_chunking import ChunkTooLongError, EmptyChunkError
from rose_embed.engine.text.long_inputs import InputTooLongError
from rose_embed.engine.rose.pipeline import embed_stream
from rose_embed.engine.rose.prefetch import prefetch

DEFAULT_CHUNK_SIZE = 10_000


@dataclass(frozen=True)
class CorpusJob:
    """What to embed and where to put it. `prompt` is the text prefix (engine_setup.prompt_for).

    `chunks_field`, where given, names the field holding each row's document as the list of
    its chunks, each embedded in the context of its document (late chunking); the output then
    has one row per chunk, and `text_field` is not read."""

    input: Path
    output: Path
    output_format: str  # "parquet" | "npy"
    input_format: str | None = None  # None: from the input's suffix
    text_field: str = "text"
    id_field: str | None = None
    chunk_size: int = DEFAULT_CHUNK_SIZE
    prompt: str = ""
    long_inputs: str = "truncate"  # what becomes of a text over the model's limit (engine/text/long_inputs.py)
    chunks_field: str | None = None
    overwrite: bool = False
    quiet: bool = False

    def settings(self) -> dict:
        """The settings a resumed run must share with the first (they decide which rows form
        which chunk and what a part file holds)."""
        settings = {"text_field": self.text_field, "id_field": self.id_field, "chunk_size": self.chunk_size,
                    "output_format": self.output_format}
        if self.long_inputs != "truncate":  # recorded only when set, so that earlier runs' manifests still match
            settings["long_inputs"] = self.long_inputs
        if self.chunks_field is not None:
            settings["chunks_field"] = self.chunks_field
        return settings

    def source(self):
        return open_source(self.input, self.input_format, self.chunks_field or self.text_field, self.id_field,
                           is_documents=self.chunks_field is not None)


@dataclass(frozen=True)
class JobReport:
    num_rows: int
    num_resumed: int  # rows finished by an earlier run, not computed again
    seconds: float

    @property
    def num_computed(self) -> int:
        return self.num_rows - self.num_resumed


def preflight(job: CorpusJob) -> None:
    """Raise what run_job would raise for a missing package, the input's first rows or an
    existing output, before the caller spends time loading a model."""
    if job.output_format == "parquet":
        require("pyarrow", "writing Parquet")
    batches = job.source().batches()
    next(batches, None)
    batches.close()
    if job.output.exists() and not job.overwrite and load_manifest(parts_dir_for(job.output)) is None:
        raise FileExistsError(f"{job.output} exists; pass --overwrite to replace it")


def run_job(engine, job: CorpusJob) -> JobReport:
    """Embed job.input into job.output; continue an unfinished run of the same job.

    Raises JobMismatchError when an unfinished run used another model, prompt, settings or
    input (unless job.overwrite), and FileExistsError when the output exists and no
    unfinished run of it does.
    """
    if job.chunk_size < 1:
        raise ValueError("the chunk size must be at least 1")
    started = time.perf_counter()
    source = job.source()
    parts = PartStore(job.output, job.output_format, job.id_field, with_chunk_index=job.chunks_field is not None)
    fresh = Manifest(
        input_path=str(job.input), input_size=job.input.stat().st_size, settings=job.settings(),
        model=model_fingerprint(engine.spec, str(engine.dtype).removeprefix("torch."), job.prompt),
    )
    manifest = _resume_or_start(job, parts, fresh)
    chunks = cut_chunks(source, job.chunk_size)
    _verify_done_chunks(chunks, manifest)

    num_resumed = manifest.num_rows_done
    bar = progress_bar(source.estimate_rows, num_resumed, job.quiet)
    try:
        manifest = _embed_remaining(engine, job, parts, manifest, chunks, bar)
    finally:
        bar.close()
    parts.assemble(manifest.num_chunks_done, engine.dimensions)
    parts.remove()
    return JobReport(manifest.num_rows_done, num_resumed, time.perf_counter() - started)


def _resume_or_start(job: CorpusJob, parts: PartStore, fresh: Manifest) -> Manifest:
    done = None if job.overwrite else load_manifest(parts.dir)
    if done is not None:
        check_resumable(done, fresh)
        return done
    if job.output.exists() and not job.overwrite:
        raise FileExistsError(f"{job.output} exists; pass --overwrite to replace it")
    parts.reset()
    save_manifest(parts.dir, fresh)  # records the model and input before the first chunk is done
    return fresh


def _verify_done_chunks(chunks, manifest: Manifest) -> None:
    """Read past the chunks an earlier run finished, checking that they still hold what was
    embedded then (their vectors are reused, not recomputed)."""
    digest, num_rows = EMPTY_CHAIN, 0
    for _ in range(manifest.num_chunks_done):
        chunk = next(chunks, None)
        if chunk is None:
            break
        digest, num_rows = chain(digest, chunk.digest), num_rows + len(chunk)
    if (digest, num_rows) != (manifest.input_digest, manifest.num_rows_done):
        raise JobMismatchError(f"the input changed since the unfinished run: its first {manifest.num_rows_done} "
                               "rows, embedded then, are not the same now")


def _embed_remaining(engine, job: CorpusJob, parts: PartStore, manifest: Manifest, chunks, bar) -> Manifest:
    # One writer thread: a chunk's file and the manifest go to disk while the next chunk computes.
    # Parts are committed in order, so the finished chunks are always a prefix of the input.
    first_row = manifest.num_rows_done  # the stream's first text is this row of the input
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rose-corpus-writer") as writer:
        pending: Future | None = None
        # Chunks are read two ahead, so that the file is read while the device computes.
        ahead = prefetch(_texts_of(chunks), depth=2, name="rose-corpus-reader")
        embedded = embed_stream(engine, ahead, on_batch=bar.update, prompt=job.prompt, long_inputs=job.long_inputs,
                                late_chunking=job.chunks_field is not None)
        try:
            for chunk, vectors in embedded:
                if not np.isfinite(vectors).all():
                    raise FloatingPointError(f"chunk {chunk.index} (rows from {chunk.first_row}) gave non-finite "
                                             "vectors; nothing of it was written")
                if pending is not None:
                    pending.result()
                manifest = manifest.after_chunk(len(chunk), chunk.digest)
                pending = writer.submit(_commit, parts, chunk, vectors, manifest)
        except ChunkTooLongError as exc:
            raise ValueError(f"row {first_row + exc.document + 1} of the input (counting from 1): its chunk "
                             f"{exc.chunk} needs {exc.num_tokens} tokens with the special tokens, more than the "
                             f"model's limit of {exc.max_seq_len} (--long-inputs error; truncate or chunk embeds "
                             "it)") from None
        except EmptyChunkError as exc:
            raise ValueError(f"row {first_row + exc.document + 1} of the input (counting from 1): its chunk "
                             f"{exc.chunk} gives no tokens of its own, so it has no vector") from None
        except InputTooLongError as exc:
            raise ValueError(f"text {first_row + exc.index + 1} of the input (counting from 1) has "
                             f"{exc.num_tokens} tokens, more than the model's limit of {exc.max_seq_len} "
                             "(--long-inputs error; truncate or chunk embeds it)") from None
        finally:
            embedded.close()  # stops the reader and tokenizer threads, also when a batch failed
        if pending is not None:
            pending.result()
    return manifest


def _texts_of(chunks) -> Iterator[tuple[Chunk, list[str]]]:
    for chunk in chunks:
        _ = chunk.digest  # hashed here, in the reader thread, rather than on the engine's
        yield chunk, chunk.texts


def _commit(parts: PartStore, chunk, vectors: np.ndarray, manifest: Manifest) -> None:
    num_chunks = [len(document) for document in chunk.texts] if parts.with_chunk_index else None
    parts.write(chunk.index, vectors, chunk.ids, num_chunks)
    save_manifest(parts.dir, manifest)  # after the part: whatever the manifest lists is on disk


def what_an_interrupt_kept(output: Path) -> str:
    """What an interrupted job leaves for the next run, as the manifest on disk says it."""
    parts_dir = parts_dir_for(output)
    manifest = load_manifest(parts_dir)
    if manifest is None or manifest.num_chunks_done == 0:
        return "no chunk was finished, so nothing was kept"
    chunks = "chunk" if manifest.num_chunks_done == 1 else "chunks"
    return (f"{manifest.num_chunks_done} finished {chunks} ({manifest.num_rows_done} texts) are kept in "
            f"{parts_dir}/; run the same command to continue")
