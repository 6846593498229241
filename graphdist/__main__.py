"""``python -m graphdist <command>``: the ``graphdist`` command without its console script."""

from graphdist.cli.main import entry

entry()
