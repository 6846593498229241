"""``graphdist``: one command with subcommands (``graphdist env``, ...); also ``python -m graphdist``.

Run book::

    graphdist env            # versions, backends, devices, cores, memory: paste it into a bug report
    python -m graphdist env  # the same, without the console script

Each subcommand is a module with ``main(argv) -> int``, registered once in :data:`SUBCOMMANDS`
and imported only when called, so ``graphdist --help`` stays fast. The training, partitioning and
planning tools keep their own commands (``graphdist-train``, ``graphdist-partition``,
``graphdist-plan``) and are listed here too.
"""

from __future__ import annotations

import importlib
import sys
from typing import Optional, Sequence

PROG = "graphdist"

# name -> ("module:function", one-line help). The one declaration of the subcommands.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "train": ("graphdist.cli.train:main", "train a GNN (same as graphdist-train)"),
    "partition": ("graphdist.cli.partition:main", "partition a graph (same as graphdist-partition)"),
    "plan": ("graphdist.cli.plan:main", "place parts and batch shares on workers (same as graphdist-plan)"),
    "import-dgl": ("graphdist.cli.import_dgl:main",
                   "turn a DGL graph or DistDGL partition export into a graphdist dataset or partition directory"),
    "env": ("graphdist.cli.env:main", "versions, backends, devices, cores, memory: paste it into a bug report"),
}


def usage() -> str:
    """The ``graphdist --help`` text: one line per subcommand.

    Example:
        >>> print(usage().splitlines()[0])
        usage: graphdist <command> [args]   (graphdist <command> --help for its flags)
    """
    width = max(len(name) for name in SUBCOMMANDS)
    lines = [f"usage: {PROG} <command> [args]   ({PROG} <command> --help for its flags)", "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, (_, text) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Dispatches ``argv[0]`` to its subcommand; an unknown one is one line and exit 2.

    Example:
        >>> main(["--help"])  # doctest: +ELLIPSIS
        usage: graphdist <command> [args] ...
        0
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in SUBCOMMANDS:
        import difflib

        close = difflib.get_close_matches(name, SUBCOMMANDS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; one of {', '.join(SUBCOMMANDS)}"
        print(f"{PROG}: unknown command {name!r}{hint}", file=sys.stderr)
        return 2
    module, func = SUBCOMMANDS[name][0].split(":")
    return int(getattr(importlib.import_module(module), func)(rest) or 0)


def entry() -> None:
    """The ``graphdist`` console script: :func:`main`, then a fast exit (``graphdist.cli.args.finish``)."""
    from graphdist.cli.args import finish

    finish(main())


if __name__ == "__main__":
    entry()
