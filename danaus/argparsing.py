"""How the ``danaus`` command parses its arguments and reports mistakes.

A mistake on the command line gives one line on stderr, ``danaus <command>: <what is
wrong>``, and exit status 2, never a traceback or a usage block. A command that cannot do
what it was asked gives the same kind of line and status 1. Every option's help shows its
default.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

USAGE_STATUS = 2
FAILURE_STATUS = 1
TRACE_HELP = (
    "write the run's trace to FILE, in the form its name gives: .jsonl JSON lines (for grep "
    "and jq), .html a sequence diagram, anything else a Perfetto timeline (Chrome JSON); "
    "repeat it for several"
)
"""The help of ``--trace FILE``, which every command that writes a trace takes."""


class CommandError(Exception):
    """A command could not do what it was asked: one line on stderr, exit status 1."""

    status = FAILURE_STATUS


class UsageError(CommandError):
    """The command line is wrong (a missing file, a target that is not what the command
    takes, a value out of range): one line on stderr, exit status 2."""

    status = USAGE_STATUS


class HelpFormatter(argparse.HelpFormatter):
    """Adds ``(default: ...)`` to the help of every option that has a default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        quiet = action.default in (None, False, [], argparse.SUPPRESS) or "%(default)" in text
        if quiet or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line: ``danaus <command>: <message>``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_STATUS, f"{self.prog}: {message}\n")

    def fail(self, error: CommandError) -> int:
        """Report ``error`` as this command's one line on stderr; the exit status it means."""
        print(f"{self.prog}: {error}", file=sys.stderr)
        return error.status


def positive_int(text: str) -> int:
    """An argument type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def fraction(text: str) -> float:
    """An argument type: a number from 0 to 1."""
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {value}")
    return value
