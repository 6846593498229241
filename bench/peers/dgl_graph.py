"""The bench graph as a DGL graph; shared by the peer scripts, which run inside the peer venv only."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def load_csc_graph(path: str) -> tuple[Any, Any]:
    """``(dgl graph in CSC, the .npz)`` from an ``.npz`` with ``indptr``/``indices`` (rows = destinations).

    CSC is DGL's name for graphdist's CSR with rows = destinations: in-neighbours are sampled
    straight from it, as graphdist does.
    """
    import dgl  # the peer venv only; graphdist never imports dgl

    data = np.load(path)
    indptr = torch.from_numpy(data["indptr"].astype(np.int64))
    indices = torch.from_numpy(data["indices"].astype(np.int64))
    g = dgl.graph(("csc", (indptr, indices, torch.tensor([], dtype=torch.int64))), num_nodes=indptr.numel() - 1)
    return g.formats(["csc"]), data


def peak_rss_bytes() -> int:
    """This process's peak resident set (VmHWM), as graphdist's workers report theirs."""
    with open("/proc/self/status") as fh:
        return next((int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:")), 0)
