"""Builds the isolated peer environment (torch 2.2.1 + dgl 2.1.0) that the sampler bench compares against.

The project itself never imports dgl: DGL 2.1's C++ sampler is pinned to torch <= 2.2, so it
lives in its own virtual environment, outside the repository, under ``$GRAPHDIST_CACHE``
(default ``~/.cache/graphdist``). Building it downloads ~5 GB (torch 2.2.1 from the package
index pulls its CUDA libraries) and takes about a minute on a fast link; it is done once and
reused (a stamp file records a complete install, so an interrupted build is redone).

Run book:
    python bench/peers/env.py            # create or reuse; prints the venv's python
    python bench/peers/env.py --rebuild  # start over

Example:
    >>> from bench.peers.env import peer_python  # doctest: +SKIP
    >>> peer_python()                             # doctest: +SKIP
    PosixPath('/root/.cache/graphdist/peers-venv/bin/python')
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from graphdist.data.loaders import cache_dir

# The newest torch/dgl pair with CPU wheels on the package index; dgl 2.1 imports the rest at
# import time (torchdata.datapipes was removed after 0.7, numpy 2 breaks torch 2.2's ABI).
PEER_REQUIREMENTS = [
    "torch==2.2.1",
    "dgl==2.1.0",
    "numpy<2",
    "torchdata==0.7.1",
    "pandas",
    "pyyaml",
    "pydantic",
]
_STAMP = ".graphdist-peers-installed"



def venv_dir() -> Path:
    """Where the peer venv lives (outside the repository, so nothing to git-ignore)."""
    return cache_dir() / "peers-venv"


def peer_python(rebuild: bool = False, quiet: bool = False) -> Path:
    """Creates (once) the peer venv and returns its python.

    Args:
        rebuild: delete and rebuild the venv. Default False.
        quiet: pass ``-q`` to pip. Default False.

    Returns:
        Path of the venv's python executable.

    Raises:
        RuntimeError: naming the failed pip step (its output was already printed).
    """
    venv = venv_dir()
    python = venv / "bin" / "python"
    if rebuild and venv.exists():
        shutil.rmtree(venv)
    if (venv / _STAMP).exists() and python.exists():
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = dict(os.environ)
    # This machine's pip config caps torch to the locally cached release; the peer needs 2.2.1,
    # so the venv's pip ignores the global constraint file (only for this isolated venv).
    env["PIP_CONSTRAINT"] = ""
    env["PIP_CONFIG_FILE"] = os.devnull
    cmd = [str(python), "-m", "pip", "install", "--disable-pip-version-check", *PEER_REQUIREMENTS]
    if quiet:
        cmd.insert(4, "-q")
    print("peers: " + " ".join(cmd), flush=True)
    done = subprocess.run(cmd, env=env)
    if done.returncode != 0:
        raise RuntimeError(
            f"pip could not install the peer environment ({' '.join(PEER_REQUIREMENTS)}) into {venv} "
            f"(exit {done.returncode}); see pip's output above"
        )
    check = subprocess.run(
        [str(python), "-c", "import dgl, torch; print('dgl', dgl.__version__, 'torch', torch.__version__)"],
        env=env, capture_output=True, text=True,
    )
    if check.returncode != 0:
        raise RuntimeError(f"the peer venv installed but `import dgl` fails:\n{check.stderr[-2000:]}")
    print("peers: " + check.stdout.strip(), flush=True)
    (venv / _STAMP).write_text(" ".join(PEER_REQUIREMENTS) + "\n")
    return python


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rebuild", action="store_true", help="delete and rebuild the peer venv")
    args = parser.parse_args(argv)
    print(peer_python(rebuild=args.rebuild))
    return 0


if __name__ == "__main__":
    sys.exit(main())
