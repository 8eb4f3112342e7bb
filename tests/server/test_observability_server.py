"""What only a real server process shows: uvicorn's log lines in JSON too, the engine process's
memory, the log file's request line. (A body refused by its declared length before it is read:
test_fuzz.py.) Everything else about observability runs in process on the fake engine
(test_observability.py).
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
import torch

from rose_embed.engine.rose.engine import resolve_dtype
from rose_embed.engine.rose.attention.ragged import AttentionShape
from rose_embed.engine.rose.attention.cpu_native import unavailable_reason
from tests.conftest import ServerProcess
from tests.support.helpers import MODEL, embed, metric

pytestmark = pytest.mark.slow  # real server processes
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def configured():
    """JSON logs with inputs."""
    proc = ServerProcess("--max-batch-tokens", "1024", "--log-format", "json", "--log-inputs")
    yield proc
    proc.stop()


def test_json_log_lines_and_log_inputs(configured):
    text = f"logged-{uuid.uuid4().hex}"
    r = embed(configured.url, {"input": [text], "model": MODEL}, headers={"x-request-id": "json-check-1"})
    assert r.status_code == 200
    time.sleep(0.3)
    entries = [json.loads(line) for line in configured.log_path.read_text().splitlines() if line.startswith("{")]
    mine = [e for e in entries if e.get("request_id") == "json-check-1"]
    assert len(mine) == 1
    entry = mine[0]
    assert entry["status"] == 200 and entry["inputs"] == 1 and entry["tokens"] > 2
    assert entry["total_ms"] >= entry["inference_ms"] > 0
    assert entry["inputs_text"] == [text]  # --log-inputs
    assert any(e["logger"].startswith("uvicorn") for e in entries)  # every line is JSON, uvicorn's too


def test_log_file_line_and_engine_process_memory(server):
    secret = f"private-{uuid.uuid4().hex}"
    r = embed(server.url, {"input": [secret, "other"], "model": MODEL}, headers={"x-request-id": "log-check-1"})
    assert r.status_code == 200
    time.sleep(0.3)
    lines = [line for line in server.log_path.read_text().splitlines() if "log-check-1" in line]
    assert len(lines) == 1, lines
    assert "POST /v1/embeddings 200" in lines[0] and "inputs=2" in lines[0]
    assert secret not in server.log_path.read_text()
    # The engine runs in a process of its own: its resident set.
    assert metric(server.url, 'rose_device_memory_bytes{device="cpu",engine="0",kind="resident"}') > 10e6
    # Every batch, warm-up included, runs eagerly on the CPU and none replays a graph.
    assert metric(server.url, "rose_eager_runs_total") >= metric(server.url, "rose_batch_sequences_count") + 2
    assert metric(server.url, "rose_graph_replays_total") == 0
    # The engine process's attention, as it told the front ends when ready: one CPU backend, the
    # native kernel where it runs for the default model's dtype here (docs/cpu-attention.md).
    backend = "native" if unavailable_reason(AttentionShape(12, 12, 32, False), resolve_dtype("auto", CPU)[0]) is None \
        else "sdpa"
    assert metric(server.url, f'rose_attention_backend{{backend="{backend}",bucket="any",engine="0",max_seqlen="any"}}') == 1


def test_the_suites_server_logs_stay_in_pytests_temporary_folder(server, tmp_path_factory):
    """Not in $TMPDIR itself, where every run used to leave a rose-embed-test-PORT.log behind."""
    assert server.log_path.is_relative_to(tmp_path_factory.getbasetemp())
