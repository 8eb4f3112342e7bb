"""The README as a user follows it: every shell and Python block runs, or says why it cannot.

The server command starts a real server process; curl, the three clients and the corpus
example run against it as written, with only the address changed to the test server's. The
Rerank section's blocks run against the server its own command starts: the embedder's hub id as
written (the embedded default model, no download), the cross-encoder's served from a local copy
under the same name (`--model NAME=PATH`), a tiny random one whose scores are checked against
CrossEncoder.predict; the Cohere block's vectors are checked against the embedder's own.
Install steps (`python3 -m venv`, `. .venv/bin/activate`, `pip install`) are checked, not
run: the suite already runs in the installed environment, so each package they name must be
this one (with extras that exist) or one of its dependencies. A block that cannot run here
(a download, the test suite itself) has `<!-- not run: REASON -->` on the line before it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest

from rose_embed.server.cli.main import build_parser
from tests.support.client_support import (
    assert_same_vectors, checked_server, reference_vectors, stop_and_check_no_server_error,
)
from tests.conftest import REPO, ServerProcess

README = REPO / "README.md"
README_URL = "http://127.0.0.1:8000"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
NOT_RUN = re.compile(r"<!-- not run: (.+?) -->")
SETUP_STEP = re.compile(r"python3 -m venv \.venv|\. \.venv/bin/activate|pip install .*")
NUMBER = re.compile(r"\d[\d,.]*\d|\d")


@dataclass(frozen=True)
class Block:
    language: str
    code: str
    line: int  # where the fence opens, 1-based
    not_run: str | None  # the reason given, for a block marked as not run
    section: str  # the title of the `## ` section it is in

    def __str__(self) -> str:
        return f"README.md:{self.line}"


def readme_blocks() -> list[Block]:
    text = README.read_text(encoding="utf-8")
    blocks = []
    for match in FENCE.finditer(text):
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        reason = NOT_RUN.fullmatch(before.strip())
        titles = re.findall(r"^## (.+)$", text[:match.start()], re.M)
        blocks.append(Block(match.group(1), match.group(2), text.count("\n", 0, match.start()) + 1,
                            reason.group(1) if reason else None, titles[-1] if titles else ""))
    return blocks


def section(title: str) -> str:
    return README.read_text(encoding="utf-8").split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def steps(code: str) -> list[str]:
    """A shell block's commands, one per line or `&&`, continuation lines joined."""
    joined = code.replace("\\\n", " ")
    return [s.strip() for line in joined.splitlines() for s in line.split(" && ") if s.strip()]


def _project_names() -> tuple[set[str], set[str]]:
    """(the extras of pyproject.toml, every distribution it names anywhere), names normalised."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"]) + [r for rs in project["optional-dependencies"].values() for r in rs]
    names = {re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements}
    return set(project["optional-dependencies"]), names


def check_install_step(step: str) -> None:
    """A `pip install` names this project (with extras that exist) or packages the project depends on."""
    extras, names = _project_names()
    args = shlex.split(step, comments=True)
    assert args[:2] == ["pip", "install"], step
    options_with_values = {"--index-url"}
    rest = iter(args[2:])
    for arg in rest:
        if arg in options_with_values:
            next(rest)
            continue
        if arg.startswith("-"):
            assert arg in {"-e", "-q", "--no-compile"}, f"{step}: unexpected option {arg}"
            continue
        local = re.fullmatch(r"\.(?:\[([\w,-]+)\])?", arg)
        if local:
            missing = set(filter(None, (local.group(1) or "").split(","))) - extras
            assert not missing, f"{step}: no such extra {missing} in pyproject.toml"
            continue
        name = re.split(r"[<>=!~\[]", arg, maxsplit=1)[0].lower().replace("_", "-")
        assert name in names, f"{step}: {name} is neither this project nor one of its dependencies"


BLOCKS = readme_blocks()
RUN = [b for b in BLOCKS if b.not_run is None]
RERANK = "Rerank"  # the section whose blocks run against a server of an embedder and a reranker


def _is_server_block(block: Block) -> bool:
    return any(s.startswith("rose-embed serve") for s in steps(block.code)) if block.language == "sh" else False


def _server_args(section: str | None = None) -> list[str]:
    """The arguments of the server command of the Rerank section (`section` RERANK), or of the other one."""
    (block,) = [b for b in RUN if _is_server_block(b) and (b.section == RERANK) == (section == RERANK)]
    (command,) = [s for s in steps(block.code) if not SETUP_STEP.fullmatch(s)]
    return shlex.split(command)[2:]


# --- the README's shape (fast) ---

def test_readme_is_a_front_door():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 180
    first_screen = "\n".join(text.splitlines()[:50])
    for what in ("rose-embed serve", "curl ", "python -m pytest"):
        assert what in first_screen, what
    clients = section("Clients")
    for client in ("from openai import OpenAI", "OpenAIEmbeddings(", "OpenAIEmbedding(", "check_embedding_ctx_length=False"):
        assert client in clients, client


def test_every_block_runs_or_says_why():
    assert {b.language for b in BLOCKS} <= {"sh", "python"}, [str(b) for b in BLOCKS if b.language not in ("sh", "python")]
    skipped = [b for b in BLOCKS if b.not_run is not None]
    assert all(b.not_run.strip() for b in skipped)
    assert len(skipped) <= 2, [f"{b}: {b.not_run}" for b in skipped]
    assert sum(_is_server_block(b) for b in RUN if b.section != RERANK) == 1, "one block starts the server"
    assert sum(_is_server_block(b) for b in RUN if b.section == RERANK) == 1, "one block starts the rerank server"
    assert len([b for b in RUN if b.language == "python"]) >= 3


def test_every_install_command_names_what_exists():
    text = README.read_text(encoding="utf-8")
    commands = [s for b in BLOCKS if b.language == "sh" for s in steps(b.code) if s.startswith("pip install")]
    commands += re.findall(r"`(pip install [^`]+)`", text)
    assert len(commands) >= 4
    for command in commands:
        check_install_step(command)


def test_ci_runs_the_readme_test_command():
    (test_block,) = [b for b in BLOCKS if "python -m pytest" in b.code]
    ci = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line and not line.startswith(("#", "set ", "cd "))]
    assert ci == [test_block.code.strip()]


def test_why_figures_are_in_the_reports_named():
    why = section("Why rose-embed")
    for rival in ("TEI", "Infinity", "vLLM", "sentence-transformers"):
        assert rival in why, rival
    bullets = [b for b in re.split(r"\n- ", why)[1:]]
    assert len(bullets) >= 4
    for bullet in bullets:
        reports = re.findall(r"`(bench/results/[\w./-]+)`", bullet)
        assert reports, f"a point names no report: {bullet[:80]}"
        texts = []
        for report in reports:
            path = REPO / report
            assert path.is_file(), report
            texts.append(path.read_text(encoding="utf-8"))
            assert "command" in "\n".join(texts[-1].splitlines()[:8]), f"{report} does not start with its command"
        prose = re.sub(r"`bench/results/[\w./-]+`", "", bullet)
        for figure in NUMBER.findall(prose):  # thousands separators or none, as each report writes them
            assert any(figure.replace(",", "") in t.replace(",", "") for t in texts), (
                f"{figure} is in no report the point names ({reports})")


# --- the blocks, run (slow: a real server) ---

@pytest.fixture(scope="module")
def readme_server() -> Iterator[ServerProcess]:
    """The server as the README starts it."""
    yield from checked_server(*_server_args())


@pytest.fixture(scope="module")
def rerank_server(tmp_path_factory) -> Iterator[ServerProcess]:
    """The Rerank section's server: the embedder's hub id as written, the reranker's served from a
    local copy under its own name."""
    from rose_embed.engine.model_files.loader import DEFAULT_MODEL_NAME
    from tests.support.reranker_checkpoints import save_cross_encoder

    args = _server_args(RERANK)
    models = [args[i + 1] for i, arg in enumerate(args) if arg == "--model"]
    assert models[0] == DEFAULT_MODEL_NAME and models[1].startswith("cross-encoder/"), models
    ranker = save_cross_encoder(tmp_path_factory.mktemp("readme-rerank") / "ranker", "bert")
    local = {models[1]: str(ranker)}
    args = [f"{arg}={local[arg]}" if arg in local else arg for arg in args]
    proc = ServerProcess(*args, "--dtype", "float32")
    proc.ranker = ranker
    yield proc
    stop_and_check_no_server_error(proc)


def _check_scores(server: ServerProcess, query: str, documents: list[str], scores: dict[int, float]) -> None:
    """Every document's score, as the tiny cross-encoder served under the README's name gives it."""
    from sentence_transformers import CrossEncoder

    expected = CrossEncoder(str(server.ranker), device="cpu").predict([(query, d) for d in documents])
    assert sorted(scores) == list(range(len(documents)))
    np.testing.assert_allclose([scores[i] for i in range(len(documents))], expected, atol=1e-4, rtol=0)


def _run_rerank_block(block: Block, server: ServerProcess, cwd) -> None:
    if _is_server_block(block):
        args = _server_args(RERANK)
        names = [args[i + 1] for i, arg in enumerate(args) if arg == "--model"]
        assert f"rose-embed: serving {', '.join(names)} on {server.url}/v1" in server.log_path.read_text()
        return
    if block.language == "python":
        namespace: dict = {}
        exec(compile(block.code.replace(README_URL, server.url), str(block), "exec"), namespace)
        _check_scores(server, namespace["query"], namespace["documents"], namespace["scores"])
        # Cohere's embed, from the embedder beside the reranker.
        assert_same_vectors(namespace["vectors"], reference_vectors(server.url, namespace["documents"]))
        return
    (curl,) = [s for s in steps(block.code) if s.startswith("curl ")]
    args = shlex.split(curl)
    body = json.loads(args[args.index("-d") + 1])
    answer = json.loads(_run_shell(block, server, cwd))
    assert answer["model"] == body["model"]
    _check_scores(server, body["query"], body["documents"], {r["index"]: r["relevance_score"] for r in answer["results"]})


def _environment() -> dict[str, str]:
    """The shell of a user whose virtualenv is active, running this checkout's code."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def _run_shell(block: Block, server: ServerProcess, cwd) -> str:
    commands = []
    for step in steps(block.code):
        if SETUP_STEP.fullmatch(step):
            if step.startswith("pip install"):
                check_install_step(step)
            continue
        commands.append(step.replace(README_URL, server.url))
    assert commands, f"{block} has nothing but install steps"
    result = subprocess.run(["bash", "-c", " && ".join(commands)], cwd=cwd, env=_environment(), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, f"{block} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def _check_server_block(block: Block, server: ServerProcess) -> None:
    for step in steps(block.code):
        if step.startswith("pip install"):
            check_install_step(step)
    banner = re.search(r"`(rose-embed: serving [^`]+)`", README.read_text(encoding="utf-8")).group(1)
    assert banner.replace(README_URL, server.url) in server.log()


def _check_curl(block: Block, server: ServerProcess, out: str) -> None:
    (curl,) = [s for s in steps(block.code) if s.startswith("curl ")]
    args = shlex.split(curl)
    body = json.loads(args[args.index("-d") + 1])
    texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
    answer = json.loads(out)
    assert answer["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    vectors = [d["embedding"] for d in answer["data"]]
    assert len(vectors[0]) == 384  # as the README says
    assert_same_vectors(vectors, reference_vectors(server.url, texts))


def _check_corpus(block: Block, server: ServerProcess, cwd) -> None:
    import pyarrow.parquet as pq

    (embed,) = [s for s in steps(block.code) if s.startswith("rose-embed embed")]
    args = build_parser().parse_args(shlex.split(embed)[1:])
    rows = [json.loads(line) for line in (cwd / args.input).read_text().splitlines() if line.strip()]
    table = pq.read_table(cwd / args.output)
    assert table.column(args.id_field).to_pylist() == [row[args.id_field] for row in rows]
    vectors = np.asarray(table.column("embedding").to_pylist(), dtype=np.float32)
    assert_same_vectors(vectors, reference_vectors(server.url, [row[args.text_field] for row in rows]))


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in RUN if b.section == RERANK], ids=str)
def test_rerank_block_runs(block, rerank_server, tmp_path):
    _run_rerank_block(block, rerank_server, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in RUN if b.section != RERANK], ids=str)
def test_block_runs(block, readme_server, tiktoken_offline, tmp_path):
    if _is_server_block(block):
        _check_server_block(block, readme_server)
        return
    assert README_URL in block.code or "rose-embed embed" in block.code, f"{block} neither calls the server nor embeds"
    if block.language == "python":
        namespace: dict = {}
        exec(compile(block.code.replace(README_URL, readme_server.url), str(block), "exec"), namespace)
        assert_same_vectors(namespace["vectors"], reference_vectors(readme_server.url, namespace["texts"]))
        return
    out = _run_shell(block, readme_server, tmp_path)
    if any(s.startswith("curl ") for s in steps(block.code)):
        _check_curl(block, readme_server, out)
    elif any(s.startswith("rose-embed embed") for s in steps(block.code)):
        _check_corpus(block, readme_server, tmp_path)
    else:
        pytest.fail(f"{block}: no check knows this block")
