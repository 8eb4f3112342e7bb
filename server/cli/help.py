"""`serve --help` shows the flags most users need; `serve --help-all` shows every flag.

The advanced ones (engine tuning, debugging switches, overrides of what a checkpoint says about
itself) work the same whether shown or not; they are only kept out of the short list.
"""

from __future__ import annotations

import argparse

_FULL_HELP = "_full_help"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Append "(default: ...)" only where the help text does not already say it, in either case
    ("Default: none" says it too), and never to an on/off flag, whose default is the state it
    does not ask for ("--no-fused-kernels (default: True)" reads as if it were on)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text.lower() or action.nargs == 0:
            return text
        return super()._get_help_string(action)


def advanced(action: argparse.Action) -> argparse.Action:
    """Keep a flag out of `--help`; `--help-all` shows it."""
    setattr(action, _FULL_HELP, action.help)
    action.help = argparse.SUPPRESS
    return action


def hidden_alias(container, flag: str, action: argparse.Action) -> argparse.Action:
    """`flag` as another spelling of `action`'s, accepted but shown by no help: a concept has one
    documented spelling across the commands, and the other still works for those who type it.
    An error names the spelling that was typed."""
    return container.add_argument(flag, dest=action.dest, type=action.type, metavar=action.metavar,
                                  default=argparse.SUPPRESS, help=argparse.SUPPRESS)


class HelpAll(argparse.Action):
    """--help-all: the help with the advanced flags too."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        for action in parser._actions:
            if hasattr(action, _FULL_HELP):
                action.help = getattr(action, _FULL_HELP)
        parser.print_help()
        parser.exit()
