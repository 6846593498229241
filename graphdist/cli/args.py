"""What the command-line tools share: one-line usage errors (exit 2), never argparse's usage block."""

from __future__ import annotations

import argparse


class UsageError(ValueError):
    """A bad flag, value or input found before any work starts: one line on stderr, exit status 2."""


def finish(code: int) -> None:
    """Ends a command: stops this process's fork server, then a fast exit with ``code``
    (``graphdist.launch.fast_exit``: atexit handlers and flushed output, no interpreter teardown)."""
    from graphdist.launch import fast_exit, stop_forkserver

    stop_forkserver()
    fast_exit(code)


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

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        """As argparse's, but a stray word says which flag it followed (``--prefetch takes no value``)."""
        import sys

        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(self.describe_extra(list(sys.argv[1:] if args is None else args), extras[0]))
        return ns

    def describe_extra(self, argv: list[str], extra: str) -> str:
        """What is wrong with the first word argparse could not place.

        Example:
            >>> p = OneLineParser(prog="tool")
            >>> _ = p.add_argument("--quiet", action="store_true")
            >>> _ = p.add_argument("--epochs", type=int)
            >>> p.describe_extra(["--quiet", "0"], "0"), p.describe_extra(["--epoks", "3"], "--epoks")
            ("--quiet takes no value (got '0')", "unrecognized argument --epoks; did you mean '--epochs'?")
        """
        import difflib

        flags = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
        if extra.startswith("-"):
            name = extra.split("=", 1)[0]
            close = difflib.get_close_matches(name, flags, n=1, cutoff=0.6)
            return f"unrecognized argument {name}" + (f"; did you mean {close[0]!r}?" if close else "")
        at = argv.index(extra) if extra in argv else 0
        before = argv[at - 1] if at > 0 else ""
        takes_none = {o for action in self._actions if action.nargs == 0 for o in action.option_strings}
        if before in takes_none:
            return f"{before} takes no value (got {extra!r})"
        return f"unexpected value {extra!r}" + (f" after {before}" if before.startswith("-") else "")


__all__ = ["OneLineParser", "UsageError", "finish"]
