"""A fake engine for the fast tier, and the app served in process around it.

The fake computes no model, but everything the server sees of it is real: the default
model's own tokenizer (engine/text/tokenizer.py on its tokenizer.json), a ModelSpec read by the
loader and adjusted per test (dimensions, prompts, quantisation, Matryoshka sizes), and
vectors that depend on every token id and its position. A vector is a random projection
of the ids: token embeddings from a fixed table, each scaled by a per-position weight,
summed and divided by the square root of the length; unit length unless the fake
quantises (then the raw vector's scale is what int8 reads, as for pplx-embed).

`execute_packed` (and `execute`, for the corpus job) computes from the packed stream (flat ids, positions, cu_seqlens); `embed`
computes the same numbers one text at a time, without packing (both add a sequence's terms
in token order, so they agree bit for bit). Tests compare the server's answer with `embed`,
so ordering, packing across requests, encodings, truncation and prompts are really checked,
in milliseconds.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from functools import cache

import httpx
import numpy as np
import torch
from litestar.testing import TestClient

from rose_embed.engine.contract.batch import PackedBatch, pack
from rose_embed.engine.contract.config import EngineConfig
from rose_embed.engine.model_files.model_view import ModelView
from rose_embed.engine.rose.lazy import LazyResult
from rose_embed.engine.model_files.loader import ModelSpec, load_spec
from rose_embed.server.app import create_app
from rose_embed.server.config import ServerConfig
from rose_embed.server.http.middleware import ObservedApp

FAKE_MODEL = "rose-test/fake-embedder"
BASE_URL = "http://testserver.local"


@cache
def _default_spec() -> ModelSpec:
    return load_spec(None)


@cache
def _tables(seed: int, vocab_size: int, max_seq_len: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Token table [vocab_size, dim] and position weights [max_seq_len, dim], float64."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((vocab_size, dim)), rng.uniform(0.5, 1.5, (max_seq_len, dim))


class FakeEngine(ModelView):
    """What the server uses of an Engine (spec, tokenizer, tokenize, execute_packed, ...).

    `quantizing` gives a model that defines int8 / binary output (raw vectors, not unit
    length); `matryoshka_dims` declares sizes as config.json would; `delay` slows each batch.
    """

    device = torch.device("cpu")
    dtype = torch.float32

    def __init__(self, dim: int = 64, name: str = FAKE_MODEL, prompts: dict[str, str] | None = None,
                 default_prompt_name: str | None = None, quantizing: bool = False,
                 matryoshka_dims: tuple[int, ...] | None = None, max_seq_len: int | None = None,
                 delay: float = 0.0):
        base = _default_spec()
        super().__init__(replace(
            base, name=name, hidden_size=dim, embedding_dim=dim, head=(), truncate_dim=None,
            prompts=dict(prompts or {}), default_prompt_name=default_prompt_name,
            quantization="tanh" if quantizing else None, normalize=not quantizing, matryoshka_dims=matryoshka_dims,
            max_seq_len=max_seq_len or base.max_seq_len,
        ))
        self.delay = delay
        seed = zlib.crc32(f"{name}/{dim}".encode())  # another fake model, other vectors
        self._tokens, self._positions = _tables(seed, self.vocab_size, self.spec.max_seq_len, dim)
        self.config = EngineConfig(device="cpu", max_batch_tokens=4096)  # the corpus job cuts batches by it
        self.batches: list[tuple[int, int]] = []  # (sequences, tokens) of every batch computed
        self.outputs: list[int] = []  # vectors pooled by every batch computed
        self.num_eager_runs = 0  # read by /metrics: a CPU engine runs every batch eagerly

    def execute(self, seqs: list[np.ndarray]) -> LazyResult:
        """One batch, as Engine.execute launches it (the corpus job's loop calls this)."""
        return self.execute_packed(pack(seqs))

    def warm_up(self) -> None:
        self.execute_packed(_pack_one(np.array([101, 102], np.int32))).wait()
        self.batches.clear()
        self.outputs.clear()

    def execute_packed(self, batch: PackedBatch) -> LazyResult:
        """The batch's vectors from its packed stream: [num_outputs, dim] float32, one per
        pooling segment (a sequence, or a late-chunked document's chunk, whose terms keep
        their positions in the whole window)."""
        if self.delay:
            time.sleep(self.delay)
        terms = self._tokens[batch.input_ids] * self._positions[batch.positions]  # [T, dim]
        if batch.segment_ids is None:
            sums = np.add.reduceat(terms, batch.cu_seqlens[:-1], axis=0)  # [B, dim]
            lengths = np.diff(batch.cu_seqlens)
        else:
            pooled = batch.segment_ids >= 0
            sums = np.zeros((batch.num_outputs, terms.shape[1]))
            np.add.at(sums, batch.segment_ids[pooled], terms[pooled])
            lengths = np.bincount(batch.segment_ids[pooled], minlength=batch.num_outputs)
        vectors = self._finish(sums, lengths)
        self.batches.append((batch.num_seqs, batch.num_tokens))
        self.outputs.append(batch.num_outputs)
        self.num_eager_runs += 1
        return LazyResult(torch.from_numpy(vectors), batch.num_outputs)

    def vectors_of(self, seqs: list[np.ndarray]) -> np.ndarray:
        """The same computation one sequence at a time (no packing): [N, dim] float32."""
        sums = np.stack([(self._tokens[ids] * self._positions[: len(ids)]).sum(0) for ids in seqs])
        return self._finish(sums, np.array([len(ids) for ids in seqs]))

    def span_vector(self, seq: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """The vector of tokens [lo, hi) of one sequence, at their positions in it (a late chunk): [dim]."""
        ids = np.asarray(seq[lo:hi])
        total = (self._tokens[ids] * self._positions[lo:hi]).sum(0)
        return self._finish(total[None], np.array([hi - lo]))[0]

    def embed(self, texts: list[str]) -> np.ndarray:
        """What the server must answer for `texts` (prompt included by the caller)."""
        return self.vectors_of(self.tokenize(texts))

    def _finish(self, sums: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        vectors = sums / np.sqrt(lengths)[:, None]
        if self.spec.normalize:
            vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors.astype(np.float32)


def _pack_one(ids: np.ndarray) -> PackedBatch:
    return PackedBatch(ids, np.arange(len(ids), dtype=np.int32), np.array([0, len(ids)], np.int32), len(ids))


def fake_config(**overrides) -> ServerConfig:
    """A server configuration for the fake: defaults as the CLI gives them, CPU, a small budget."""
    engine = overrides.pop("engine", EngineConfig(device="cpu", max_batch_tokens=4096))
    return ServerConfig(engine=engine, **overrides)


def observed_app(engine: FakeEngine, config: ServerConfig | None = None) -> ObservedApp:
    """The app as `rose-embed serve` runs it: create_app wrapped in the HTTP middleware."""
    config = config or fake_config()
    return ObservedApp(create_app(config, engine), log_inputs=config.log_inputs)


@contextmanager
def serve(engine: FakeEngine, config: ServerConfig | None = None) -> Iterator[TestClient]:
    """An httpx client wired to the app in this process (lifespan run, model 'loaded')."""
    with serve_app(observed_app(engine, config)) as client:
        yield client


@contextmanager
def serve_app(app: ObservedApp) -> Iterator[TestClient]:
    """A client of the app in this process once its runtime is ready; `client.runtime` is that runtime."""
    with TestClient(app, base_url=BASE_URL, timeout=30) as client:
        client.runtime = app.app.state.runtime
        deadline = time.monotonic() + 10
        while not client.runtime.is_ready:
            assert time.monotonic() < deadline, "the in-process app did not become ready"
            time.sleep(0.005)
        yield client


@asynccontextmanager
async def serve_async(engine: FakeEngine, config: ServerConfig | None = None) -> AsyncIterator[httpx.AsyncClient]:
    """The same on the caller's event loop, through httpx's own ASGI transport."""
    app = observed_app(engine, config)
    async with app.app.lifespan():
        while not app.app.state.runtime.is_ready:
            await asyncio.sleep(0.005)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL, timeout=30) as client:
            yield client
