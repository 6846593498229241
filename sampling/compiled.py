"""Compiled (numba) versions of the two per-edge loops of sampling: Floyd's draws and relabelling.

The torch kernels in ``sampling.kernels`` and ``sampling.relabel`` are vectorised: a hop costs a
few hundred torch calls whatever its size, and on one thread their dispatch and their passes
over temporaries were half of a 512-seed batch's sampling time. These loops do the same work in
one pass per hop and give **the same results, bit for bit**: the random numbers are still drawn
by torch from the sampler's generator (so checkpoints, resume and the torch path agree), and the
loops apply exactly the arithmetic of the torch kernels (float32 ``u * (j + 1)`` truncated, a
taken draw replaced by ``j``; first appearances numbered in stream order). A 512-seed, 10,10
batch on a 50,000-node part: 1.71 ms with the torch kernels, 0.63 ms with these.

Why numba and hand-written loops: no maintained library on the package registries samples CSR
neighbourhoods for this torch (pyg-lib and torch-sparse publish no wheels for it), and numba
compiles these ~40 lines on first use (0.7 s once; the cache under ``GRAPHDIST_CACHE/numba``
loads in ~0.25 s). Small hops (fewer than :data:`MIN_DRAWS` draws) stay on torch, so small jobs
and most tests never import numba; ``GRAPHDIST_NUMBA=0`` turns these loops off, and without numba
installed the torch kernels run.

Example:
    >>> import torch
    >>> indptr, indices = torch.tensor([0, 3, 4]), torch.tensor([4, 5, 6, 7])
    >>> u = torch.tensor([[0.9], [0.1]])  # 2 draws from row 0's 3 neighbours
    >>> [t.tolist() for t in floyd_sample(indptr, indices, torch.tensor([0]), u, padded=False)]
    [[5, 4], [2]]
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor

from graphdist._numba import compiled_enabled, jit, numba_module

__all__ = ["MIN_DRAWS", "enabled", "floyd_sample", "relabel_add"]

# Hops with fewer draws (nodes x fan-out) stay on the torch kernels: there the loops save
# microseconds, and a small job would pay numba's import and cache load (~0.45 s a process).
MIN_DRAWS = 4096
_FREE = np.int32(np.iinfo(np.int32).max)  # sampling.relabel's mark of a node not in the batch


def enabled(draws: int) -> bool:
    """Whether a hop of ``draws`` draws runs the compiled loops (numba installed, ``GRAPHDIST_NUMBA`` not 0).

    Example:
        >>> enabled(10)  # below MIN_DRAWS: the torch kernels
        False
    """
    return compiled_enabled(draws, MIN_DRAWS)


@functools.lru_cache(maxsize=1)
def _kernels() -> Optional[Any]:
    """The compiled loops, or None without numba."""
    return _compile(jit()) if numba_module() is not None else None


def _compile(jit: Any) -> Any:
    @jit
    def floyd_row(u: Any, i: int, deg: int, k: int, chosen: Any) -> None:
        # sampling.kernels._floyd on one node of degree deg > k: step s draws t in [0, j],
        # j = deg - k + s, with u's own precision (float32 unless the hubs need float64), and
        # takes j instead when t is taken.
        for s in range(k):
            j = deg - k + s
            t = min(int(u[s, i] * u.dtype.type(j + 1)), j)
            for r in range(s):
                if chosen[r] == t:
                    t = j
                    break
            chosen[s] = t

    @jit
    def sample_compact(indptr: Any, indices: Any, nodes: Any, u: Any, k: int) -> Any:
        n = nodes.shape[0]
        counts = np.empty(n, np.int64)
        out = np.empty(n * k, np.int64)
        chosen = np.empty(k, np.int64)
        e = 0
        for i in range(n):
            start = indptr[nodes[i]]
            deg = indptr[nodes[i] + 1] - start
            if deg <= k:  # all neighbours, in order
                for t in range(deg):
                    out[e + t] = indices[start + t]
                counts[i] = deg
            else:
                floyd_row(u, i, deg, k, chosen)
                for s in range(k):
                    out[e + s] = indices[start + chosen[s]]
                counts[i] = k
            e += counts[i]
        return out[:e], counts

    @jit
    def sample_padded(indptr: Any, indices: Any, nodes: Any, u: Any, k: int) -> Any:
        n = nodes.shape[0]
        out = np.full((n, k), -1, indices.dtype)
        chosen = np.empty(k, np.int64)
        for i in range(n):
            start = indptr[nodes[i]]
            deg = indptr[nodes[i] + 1] - start
            if deg <= k:  # all neighbours in the last deg slots, as the torch kernel pads
                for t in range(deg):
                    out[i, k - deg + t] = indices[start + t]
            else:
                floyd_row(u, i, deg, k, chosen)
                for s in range(k):
                    out[i, s] = indices[start + chosen[s]]
        return out

    @jit
    def relabel(mark: Any, nbrs: Any, stream: int, count: int, idmap: Any) -> Any:
        # sampling.relabel._DenseRelabeler.add as one loop: mark[v] = first position of v in the
        # batch's stream; idmap[position] = local id (for first positions).
        m = nbrs.shape[0]
        local = np.empty(m, np.int64)
        new_ids = np.empty(m, np.int32)
        new_nodes = np.empty(m, np.int64)
        fresh = 0
        for t in range(m):
            v = nbrs[t]
            first = mark[v]
            if first == _FREE:
                first = stream + t
                mark[v] = first
                new_nodes[fresh] = v
                fresh += 1
            new_ids[t] = count + fresh - 1
            local[t] = idmap[first] if first < stream else new_ids[first - stream]
        return local, new_ids, new_nodes[:fresh]

    return sample_compact, sample_padded, relabel


def floyd_sample(indptr: Tensor, indices: Tensor, nodes: Tensor, u: Tensor, padded: bool) -> Any:
    """Up to ``k = u.shape[0]`` neighbours of each node without replacement, with Floyd's draws ``u`` (``[k, n]``).

    Returns ``(neighbors, counts)`` as ``sampling.kernels.sample_csr`` does, or with ``padded`` the
    ``[n, k]`` table of ``sample_csr_padded`` (``-1`` first in a row with fewer neighbours).
    """
    sample_compact, sample_padded, _ = _kernels()
    args = (indptr.numpy(), indices.numpy(), nodes.numpy(), u.numpy(), int(u.shape[0]))
    if padded:
        return torch.from_numpy(sample_padded(*args))
    out, counts = sample_compact(*args)
    return torch.from_numpy(out), torch.from_numpy(counts)


def relabel_add(mark: Tensor, nbrs: Tensor, stream: int, count: int, idmap: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(local ids of nbrs, idmap of their positions, new nodes in order)``: ``_DenseRelabeler.add``'s work.

    ``mark`` (int32, updated in place) and ``idmap`` are the relabeller's; ``stream`` is the position
    of ``nbrs[0]`` in the batch's stream and ``count`` the nodes numbered so far.
    """
    _, _, relabel = _kernels()
    local, new_ids, new_nodes = relabel(mark.numpy(), nbrs.numpy(), int(stream), int(count), idmap.numpy())
    return torch.from_numpy(local), torch.from_numpy(new_ids), torch.from_numpy(new_nodes)
