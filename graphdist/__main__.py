"""``python -m graphdist <command>``: the ``graphdist`` command without its console script."""

from graphdist.cli.main import entry

if __name__ == "__main__":  # importing the module (docs, tooling) runs nothing
    entry()
