"""Run the examples of docs/long-inputs.md's texts over the limit against a real server, and check what the page
says they give."""

from __future__ import annotations

import json
import shlex
import subprocess

import numpy as np
import pytest

from rose_embed.server.cli.main import build_parser
from tests.conftest import REPO
from tests.support.helpers import code_blocks

pytestmark = pytest.mark.slow  # a real server process

DOC = REPO / "docs" / "long-inputs.md"
SECTION = "Texts over the model's limit"
DOC_URL = "http://localhost:8000"


def test_commands_parse():
    commands = [shlex.split(line) for line in code_blocks(DOC, "sh", SECTION)]
    assert [c[:2] for c in commands] == [["rose-embed", "serve"], ["rose-embed", "embed"]]
    for command in commands:
        assert build_parser().parse_args(command[1:]).long_inputs == "chunk"


def test_python_examples(server):
    sdk, plain = code_blocks(DOC, "python", SECTION)
    namespace: dict = {}
    exec(compile(sdk.replace(DOC_URL, server.url), str(DOC), "exec"), namespace)
    response = namespace["response"]
    assert len(response.data) == 2
    # The page's 11 windows, [CLS] and [SEP] in each, and the query's 3 tokens and its own two.
    assert response.usage.prompt_tokens == 2700 + 2 * 11 + 3 + 2
    assert abs(np.linalg.norm(namespace["vector"]) - 1) < 1e-5
    exec(compile(plain.replace(DOC_URL, server.url), str(DOC), "exec"), namespace)
    assert namespace["r"].status_code == 400
    assert namespace["r"].json()["error"]["message"].startswith("This model's maximum context length is 256 tokens")


def test_curl_example(server, tmp_path):
    (code,) = code_blocks(DOC, "bash", SECTION)
    out = subprocess.run(["bash", "-c", code.replace(DOC_URL, server.url)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    answer = json.loads(out)
    assert len(answer["data"]) == 1 and answer["usage"]["prompt_tokens"] == 1614  # as the page says
