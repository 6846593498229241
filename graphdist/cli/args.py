"""What the command-line tools share: one-line usage errors (exit 2), never argparse's usage block."""

from __future__ import annotations

import argparse


class UsageError(ValueError):
    """A bad flag, value or input found before any work starts: one line on stderr, exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors raise ``UsageError`` (one line) instead of printing usage.

    Example:
        >>> p = OneLineParser(prog="tool")
        >>> _ = p.add_argument("--n", type=int)
        >>> p.parse_args(["--n", "x"])
        Traceback (most recent call last):
        ...
        graphdist.cli.args.UsageError: argument --n: invalid int value: 'x' (see tool --help)
    """

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see {self.prog} --help)")


__all__ = ["OneLineParser", "UsageError"]
