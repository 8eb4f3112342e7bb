"""A front end's tokenizer processes (server/tokenizer_processes.py): a large request's parts
tokenized side by side in processes give exactly what tokenizing in place gives, and a dead
process leaves the front end tokenizing in place."""

from __future__ import annotations

import asyncio
import os
import signal

import numpy as np
import pytest

from engine.text.tokenizer import tokenizer_for
from engine.model_files.loader import load_spec
from server.tokenizer_processes import TokenizerProcesses
from tests.fake_engine import FAKE_MODEL, FakeEngine, fake_config, observed_app, serve_app

pytestmark = pytest.mark.slow  # spawned processes


def _texts(texts: list[str], n: int) -> list[str]:
    mixed = [*texts[: n - 3], "naïve café – déjà vu", "   spaced   out   ", "UPPER lower 123"]
    return mixed[:n]


def test_processes_tokenize_as_the_front_end_does(texts):
    tokenizer = tokenizer_for(load_spec(None))
    processes = TokenizerProcesses(tokenizer, 2)
    try:
        processes.warm_up()
        sample = _texts(texts, 100)
        got = asyncio.run(processes.encode(sample))
        want = tokenizer.encode(sample)
        assert len(got) == len(want) and all(np.array_equal(g, w) for g, w in zip(got, want))
    finally:
        processes.shutdown()
    assert asyncio.run(processes.encode(sample)) is None  # shut down: the caller tokenizes in place


def test_a_large_request_gets_the_same_answer_with_and_without_processes_and_survives_a_dead_one(texts):
    body = {"input": _texts(texts, 300), "model": FAKE_MODEL, "encoding_format": "float"}
    answers = {}
    for processes in (0, 2):
        app = observed_app(FakeEngine(), fake_config(tokenizer_processes=processes))
        with serve_app(app) as client:
            r = client.post("/v1/embeddings", json=body)
            assert r.status_code == 200, r.text
            answers[processes] = r.json()
            runtime = app.app.state.runtime
            if processes:
                assert runtime.tokenizer_processes.is_usable and runtime.parts_ahead == 4
                for pid in list(runtime.tokenizer_processes._pool._processes):
                    os.kill(pid, signal.SIGKILL)
                again = client.post("/v1/embeddings", json=body)
                assert again.status_code == 200 and again.json()["data"] == answers[processes]["data"]
                assert not runtime.tokenizer_processes.is_usable
    assert answers[0]["usage"] == answers[2]["usage"]
    got = np.array([d["embedding"] for d in answers[2]["data"]])
    want = np.array([d["embedding"] for d in answers[0]["data"]])
    np.testing.assert_array_equal(got, want)
