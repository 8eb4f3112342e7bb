"""What `serve --help-all` and `embed --help` print: each flag under the heading the docs give
it, each default said once."""

from __future__ import annotations

import pytest

from rose_embed.server.cli.main import build_parser

HARDENING_ADVANCED = ("--max-input-chars", "--engine-stall-timeout", "--keep-alive-timeout", "--log-inputs")


def _help_text(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)
    return capsys.readouterr().out


def _sections(text: str) -> dict[str, list[str]]:
    """Each heading of argparse's help ("options:", "advanced (shown by --help-all):") -> the flags under it."""
    sections: dict[str, list[str]] = {}
    heading = None
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            heading = line[:-1]
            sections[heading] = []
        elif heading is not None and line.startswith("  --"):
            sections[heading].append(line.split()[0])
    return sections


@pytest.mark.parametrize("argv", [["serve", "--help-all"], ["embed", "--help"]])
def test_quantization_help_says_its_default_once(argv, capsys):
    text = " ".join(_help_text(argv, capsys).split())
    start = text.index("--quantization {fp8,int8} fp8:")
    quantization = text[start:text.index("--fp8-bf16-layers", start)]
    assert "Default: none" in quantization
    assert "(default: None)" not in quantization


def test_advanced_hardening_flags_are_under_the_advanced_heading(capsys):
    sections = _sections(_help_text(["serve", "--help-all"], capsys))
    advanced = sections["advanced (shown by --help-all)"]
    assert set(HARDENING_ADVANCED) <= set(advanced)
    assert not set(HARDENING_ADVANCED) & set(sections["options"])
    assert {"--max-body-bytes", "--request-timeout", "--log-format"} <= set(sections["options"])


@pytest.mark.parametrize("argv", [["serve", "--help"], ["embed", "--help"]])
def test_max_seq_len_help_says_the_model_caps_it(argv, capsys):
    text = " ".join(_help_text(argv, capsys).split())
    assert "--max-seq-len MAX_SEQ_LEN truncate" in text
    start = text.index("--max-seq-len MAX_SEQ_LEN truncate")
    assert "at most the model's limit (default: the model's limit)" in text[start:start + 200]
