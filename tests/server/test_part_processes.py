"""The part processes (server/processes/part_processes.py, server/pipeline/part_process_client.py): a large request's
parts tokenized and encoded side by side give exactly what the front end gives in place, a
process shared by two front ends answers each its own parts, and a dead process leaves the
front end doing its share in place."""

from __future__ import annotations

import asyncio
import os
import signal

import msgspec
import numpy as np
import pytest

from rose_embed.compat.encoding import encode_embeddings
from rose_embed.engine.model_files.loader import load_spec
from rose_embed.engine.text.tokenizer import tokenizer_for
from rose_embed.server.pipeline.part_process_client import PartProcesses
from rose_embed.server.processes.part_processes import start_part_processes
from tests.support.fake_engine import FAKE_MODEL, FakeEngine, fake_config, observed_app, serve_app

pytestmark = pytest.mark.slow  # spawned processes


def _texts(texts: list[str], n: int) -> list[str]:
    mixed = [*texts[: n - 3], "naïve café – déjà vu", "   spaced   out   ", "UPPER lower 123"]
    return mixed[:n]


@pytest.fixture(scope="module")
def pool():
    tokenizer = tokenizer_for(load_spec(None))
    started = start_part_processes(tokenizer.recipe, 2)
    yield tokenizer, started
    started.stop()
    assert not any(p.is_alive() for p in started.processes)
    assert not os.path.exists(started.directory)  # its sockets go with it


def test_processes_tokenize_and_encode_as_the_front_end_does(pool, texts):
    tokenizer, started = pool
    sample = _texts(texts, 100)
    vectors = np.random.default_rng(0).standard_normal((7, 24)).astype(np.float32)

    async def ask():
        processes = PartProcesses(started.addresses)
        await processes.connect()
        assert processes.num_processes == 2
        try:
            return await asyncio.gather(processes.tokenize(sample), processes.tokenize(sample[:5]),
                                        processes.encode(vectors, "base64", None, False),
                                        processes.encode(vectors, "float", 8, False))
        finally:
            processes.close()

    ids, few_ids, as_base64, as_float = asyncio.run(ask())
    for got, want in ((ids, tokenizer.encode(sample)), (few_ids, tokenizer.encode(sample[:5]))):
        assert len(got) == len(want) and all(np.array_equal(g, w) for g, w in zip(got, want))
    for got, (encoding_format, dimensions) in ((as_base64, ("base64", None)), (as_float, ("float", 8))):
        want = encode_embeddings(vectors, encoding_format, dimensions, False)
        assert all(isinstance(g, msgspec.Raw) for g in got)
        assert [bytes(g) for g in got] == [bytes(w) for w in want]


def test_two_front_ends_share_the_processes_each_getting_its_own_parts(pool, texts):
    tokenizer, started = pool
    samples = [_texts(texts[i * 50:], 40) for i in range(6)]

    async def front_end(first: int):
        processes = PartProcesses(started.addresses, first=first)
        await processes.connect()
        try:
            return await asyncio.gather(*(processes.tokenize(sample) for sample in samples))
        finally:
            processes.close()

    async def both():
        return await asyncio.gather(front_end(0), front_end(1))

    for answers in asyncio.run(both()):
        for got, sample in zip(answers, samples):
            assert all(np.array_equal(g, w) for g, w in zip(got, tokenizer.encode(sample)))


def test_an_error_in_a_process_is_the_callers_error(pool):
    _, started = pool

    async def ask():
        processes = PartProcesses(started.addresses)
        await processes.connect()
        try:
            with pytest.raises(ValueError, match="no whole-array encoder"):
                await processes.encode(np.ones((2, 4), np.float32), "hex", None, False)
            return await processes.tokenize(["still serving"])  # the process goes on
        finally:
            processes.close()

    assert len(asyncio.run(ask())) == 1


def test_a_large_request_gets_the_same_answer_with_and_without_processes_and_survives_dead_ones(texts):
    answers = {}
    for encoding_format in ("float", "base64"):
        body = {"input": _texts(texts, 300), "model": FAKE_MODEL, "encoding_format": encoding_format}
        for processes in (0, 2):
            app = observed_app(FakeEngine(), fake_config(part_processes=processes))
            with serve_app(app) as client:
                r = client.post("/v1/embeddings", json=body)
                assert r.status_code == 200, r.text
                answers[processes] = r.json()
                runtime = app.app.state.runtime
                if processes:
                    assert runtime.part_processes.num_processes == 2 and runtime.parts_ahead(runtime.models[0]) == 4
                    for process in runtime._own_part_processes.processes:
                        os.kill(process.pid, signal.SIGKILL)
                    again = client.post("/v1/embeddings", json=body)
                    assert again.status_code == 200 and again.json()["data"] == answers[processes]["data"]
                    assert not runtime.part_processes.is_usable
        assert answers[0] == answers[2]
