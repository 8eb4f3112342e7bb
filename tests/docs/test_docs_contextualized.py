"""Run the late-chunking examples of docs/long-inputs.md against a real server, and check what the page says they
give."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest

from rose_embed.server.cli.main import build_parser
from tests.conftest import REPO
from tests.support.helpers import code_blocks

pytestmark = pytest.mark.slow  # a real server process

DOC = REPO / "docs" / "long-inputs.md"
SECTION = "Late chunking: one vector per chunk"
DOC_URL = "http://localhost:8000"


def test_commands_parse():
    commands = [shlex.split(line) for line in code_blocks(DOC, "sh", SECTION)]
    assert [c[:2] for c in commands] == [["rose-embed", "serve"], ["rose-embed", "embed"]]
    embed = build_parser().parse_args(commands[1][1:])
    assert (embed.chunks_field, embed.id_field) == ("chunks", "id")


def test_curl_example_gives_what_the_page_shows(server, tmp_path):
    (code,) = code_blocks(DOC, "bash", SECTION)
    out = subprocess.run(["bash", "-c", code.replace(DOC_URL, server.url)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    answer = json.loads(out)
    assert [len(d["data"]) for d in answer["data"]] == [3, 2]
    assert answer["usage"] == {"prompt_tokens": 49, "total_tokens": 49}
    shown = json.loads(code_blocks(DOC, "json", SECTION)[0].replace(", ...]", "]"))
    assert answer["model"] == shown["model"] and answer["usage"] == shown["usage"]
    for document, page in zip(answer["data"], shown["data"]):
        for chunk, on_page in zip(document["data"], page["data"]):
            assert [round(x, 3) for x in chunk["embedding"][:2]] == on_page["embedding"]


def test_python_examples(server):
    plain, sdk = code_blocks(DOC, "python", SECTION)
    namespace: dict = {}
    exec(compile(plain.replace(DOC_URL, server.url), str(DOC), "exec"), namespace)
    assert len(namespace["chunks"]) == 2 and namespace["chunks"][0].shape == (384,)
    exec(compile(sdk.replace(DOC_URL, server.url), str(DOC), "exec"), namespace)
    assert [len(v) for v in namespace["vectors"]] == [2, 1]
    assert len(namespace["vectors"][0][0]) == 384
