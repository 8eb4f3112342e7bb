"""docs/serve.md's flag tables name every flag of `serve`, one line each: the first table what
`--help` shows, the second the advanced ones that only `--help-all` shows."""

from __future__ import annotations

import argparse
import re

from rose_embed.server.cli.main import build_parser
from rose_embed.server.cli.help import _FULL_HELP
from tests.conftest import REPO

PAGE = REPO / "docs" / "serve.md"


def _serve_parser() -> argparse.ArgumentParser:
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices["serve"]


def _parser_flags() -> tuple[list[str], list[str]]:
    """(shown by --help, advanced), each flag by its longest spelling; flags that neither help
    shows (a test's hook) are left out."""
    shown, advanced = [], []
    for action in _serve_parser()._actions:
        flag = max(action.option_strings, key=len)
        if action.help != argparse.SUPPRESS:
            shown.append(flag)
        elif hasattr(action, _FULL_HELP):
            advanced.append(flag)
    return shown, advanced


def _page_tables() -> list[list[list[str]]]:
    """The tables of docs/serve.md's Flags section: each row's flags (the spellings in its first cell)."""
    section = PAGE.read_text(encoding="utf-8").split("\n## Flags\n", 1)[1].split("\n## ", 1)[0]
    tables, rows = [], None
    for line in section.splitlines():
        if not line.startswith("|"):
            rows = None
            continue
        if rows is None:  # the header line starts a table
            rows = []
            tables.append(rows)
            continue
        first = line.split("|")[1]
        if set(first.strip()) <= set("- "):
            continue  # the header's rule
        rows.append(re.findall(r"`(-{1,2}[a-z][a-z0-9-]*)", first))
    return tables


def test_page_has_one_line_per_flag_in_help_and_help_all_tables():
    shown, advanced = _parser_flags()
    tables = _page_tables()
    assert len(tables) == 2, "docs/serve.md has two flag tables: --help's, then the advanced ones"
    for table, flags, name in zip(tables, (shown, advanced), ("--help", "--help-all")):
        assert all(table), f"a row of the {name} table names no flag"
        named = [max(row, key=len) for row in table]
        several = [row for row in table if len(row) > 1 and row != ["-h", "--help"]]
        assert not several, f"a row of the {name} table names several flags: {several}"
        assert sorted(named) == sorted(flags), (
            f"docs/serve.md's {name} table differs from the parser: missing {sorted(set(flags) - set(named))}, "
            f"extra {sorted(set(named) - set(flags))}")
    assert len(shown) <= 28, f"`serve --help` shows {len(shown)} flags"
