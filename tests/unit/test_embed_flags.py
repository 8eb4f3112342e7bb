"""`rose-embed embed`'s flags judged as serve judges them (docs/corpus.md: "as for serve"), and
what its help says of them; no model weights load."""

from __future__ import annotations

import pytest

from rose_embed.server.cli.main import main
from tests.conftest import REPO


class _Stopped(Exception):
    pass


@pytest.fixture
def job(tmp_path, monkeypatch):
    """An embed command on a one-line input, stopped where the engine would be built: the
    options it would be built with, or None where it stopped before."""
    from rose_embed.corpus import engine_setup

    built = {}

    def build_engine(**options):
        built.update(options)
        raise _Stopped

    monkeypatch.setattr(engine_setup, "build_engine", build_engine)
    source = tmp_path / "in.jsonl"
    source.write_text('{"text": "a"}\n')

    def run(*flags: str) -> dict | None:
        try:
            main(["embed", str(source), "-o", str(tmp_path / "out.npy"), *flags])
        except _Stopped:
            return built
        raise AssertionError("the job ran without building an engine")

    return run


def test_a_batch_budget_below_the_models_length_is_refused_as_serve_refuses_it(job, capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        job("--max-batch-tokens", "10")
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "rose-embed embed: error: argument --max-batch-tokens: must be at least the model's max sequence length "
        "(256); got 10"]
    assert not (tmp_path / "out.npy").exists()
    assert job("--max-batch-tokens", "256")["max_batch_tokens"] == 256
    assert job("--max-batch-tokens", "100", "--max-seq-len", "100")["max_batch_tokens"] == 100


def test_a_prompt_the_model_lacks_is_refused_naming_the_flag(job, capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        job("--prompt-name", "query")
    assert exc.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("rose-embed embed: error: argument --prompt-name: prompt 'query' is not one of this "
                           "model's prompts")
    assert not (tmp_path / "out.npy").exists()


def test_a_max_seq_len_past_the_models_limit_is_one_warning(job, capsys):
    assert job("--max-seq-len", "1000")["max_seq_len"] == 1000
    assert capsys.readouterr().err.splitlines() == [
        "rose-embed embed: warning: --max-seq-len 1000 is above the model's limit, which is used instead: "
        "sentence-transformers/all-MiniLM-L6-v2 takes at most 256 tokens"]
    job("--max-seq-len", "200")
    assert capsys.readouterr().err == ""


def test_a_folder_as_input_is_named_a_folder(tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["embed", str(tmp_path), "-o", str(tmp_path / "out.npy")])
    assert exc.value.code == f"rose-embed embed: {tmp_path}: is a directory; give a file"


def test_num_threads_default_reads_the_same_in_help_and_docs(capsys):
    """The engine takes torch's own thread count, at most the cores the process may use."""
    with pytest.raises(SystemExit):
        main(["embed", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--num-threads NUM_THREADS torch CPU threads (default: torch's own count, at most the cores this " \
           "process may use" in text
    corpus = " ".join((REPO / "docs" / "corpus.md").read_text(encoding="utf-8").split())
    assert "`--num-threads` (default: torch's own count, at most the cores the process may use" in corpus


def test_docs_name_every_model_flag():
    """docs/corpus.md's model flags paragraph names each flag of embed's model group."""
    import argparse

    from rose_embed.server.cli.main import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    (group,) = [g for g in commands.choices["embed"]._action_groups if g.title.startswith("model and engine")]
    flags = [max(a.option_strings, key=len) for a in group._group_actions if a.help != argparse.SUPPRESS]
    page = (REPO / "docs" / "corpus.md").read_text(encoding="utf-8")
    paragraph = page[page.index("**Model flags**"):].split("\n\n", 1)[0]
    assert "--revision" in flags
    assert [flag for flag in flags if f"`{flag}`" not in paragraph] == []
