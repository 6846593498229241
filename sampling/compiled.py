"""Compiled (numba) versions of sampling's per-edge loops: Floyd's draws, relabelling, block building, and the
distributed source's split of a hop into own and remote nodes and its merge of the two sets of rows.

The torch kernels in ``sampling.kernels`` and ``sampling.relabel`` are vectorised: a hop costs a
few hundred torch calls whatever its size, and on one thread their dispatch and their passes
over temporaries were half of a 512-seed batch's sampling time. These loops do the same work in
one pass per hop and give **the same results, bit for bit**: the random numbers are still drawn
by torch from the sampler's generator (so checkpoints, resume and the torch path agree), and the
loops apply exactly the arithmetic of the torch kernels (float32 ``u * (j + 1)`` truncated, a
taken draw replaced by ``j``; first appearances numbered in stream order). A 512-seed, 10,10
batch on a 50,000-node part: 1.79 ms with the torch kernels, 0.90 ms with these.

Why numba and hand-written loops: no maintained library on the package registries samples CSR
neighbourhoods for this torch (pyg-lib and torch-sparse publish no wheels for it). numba compiles
these loops once (~1 s) into a cache under ``GRAPHDIST_CACHE/numba``; loading numba and that cache
costs a process ~0.5 s, so a process runs its first ``graphdist._numba.WARMUP_CALLS`` eligible
hops on torch and loads the loops only when it has shown it is long enough to repay them. Small
hops (fewer than :data:`MIN_DRAWS` draws) always stay on torch; ``GRAPHDIST_NUMBA=0`` turns these
loops off, and without numba installed the torch kernels run.

Example:
    >>> import torch
    >>> indptr, indices = torch.tensor([0, 3, 4]), torch.tensor([4, 5, 6, 7])
    >>> u = torch.tensor([[0.9], [0.1]])  # 2 draws from row 0's 3 neighbours
    >>> starts, deg = indptr[:1], indptr[1:2]  # row 0
    >>> [t.tolist() for t in floyd_sample(indices, starts, deg, u, padded=False)]
    [[5, 4], [2]]
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from graphdist._numba import compiled_enabled, numba_module

__all__ = ["MIN_DRAWS", "block_index", "enabled", "floyd_sample", "merge_rows", "relabel_add", "split_range"]

# Hops with fewer draws (nodes x fan-out) stay on the torch kernels: there the loops save
# microseconds, and a small job would pay numba's import and cache load (~0.5 s a process).
MIN_DRAWS = 4096


def enabled(draws: int) -> bool:
    """Whether a hop of ``draws`` draws runs the compiled loops (numba installed, ``GRAPHDIST_NUMBA`` not 0).

    Example:
        >>> enabled(10)  # below MIN_DRAWS: the torch kernels
        False
    """
    return compiled_enabled(draws, MIN_DRAWS)


def _kernels() -> Optional[Any]:
    """The module of compiled loops (``sampling._loops``), or None without numba."""
    if numba_module() is None:
        return None
    import sampling._loops as _loops

    return _loops


def floyd_sample(indices: Tensor, starts: Tensor, deg: Tensor, u: Tensor, padded: bool) -> Any:
    """Up to ``k = u.shape[0]`` neighbours of each node without replacement, with Floyd's draws ``u`` (``[k, n]``);
    ``starts`` and ``deg`` are the nodes' CSR row starts and degrees.

    Returns ``(neighbors, counts)`` as ``sampling.kernels.sample_csr`` does, or with ``padded`` the
    ``[n, k]`` table of ``sample_csr_padded`` (``-1`` first in a row with fewer neighbours).
    """
    loops = _kernels()
    args = (indices.numpy(), starts.numpy(), deg.numpy(), u.numpy(), int(u.shape[0]))
    if padded:
        return torch.from_numpy(loops.sample_padded(*args))
    values, counts = loops.sampled_values(*args)
    return torch.from_numpy(values).to(torch.int64), torch.from_numpy(counts)


def relabel_add(mark: Tensor, nbrs: Tensor, stream: int, count: int, idmap: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(local ids of nbrs, idmap through this hop, new nodes in order)``: ``_DenseRelabeler.add``'s work.

    ``mark`` (int32, updated in place) and ``idmap`` (positions so far -> local ids) are the
    relabeller's; ``stream`` is the position of ``nbrs[0]`` in the batch's stream and ``count`` the
    nodes numbered so far.
    """
    local, new_ids, new_nodes = _kernels().relabel(mark.numpy(), nbrs.numpy(), int(stream), int(count), idmap.numpy())
    return torch.from_numpy(local), torch.cat([idmap, torch.from_numpy(new_ids)]), torch.from_numpy(new_nodes)


def merge_rows(num_nodes: int, own_idx: Tensor, own: tuple[Tensor, Tensor], remote_idx: Tensor,
               table: Tensor) -> tuple[Tensor, Tensor]:
    """``(neighbors, counts)`` of ``num_nodes`` nodes in order, from two sets of rows: node ``own_idx[i]``
    has own row ``i`` (``own``: neighbours grouped by row, and counts), node ``remote_idx[j]`` the
    real entries of the ``-1``-padded ``table[j]``.

    ``sampling.distributed``'s assembly in one pass: the same result as writing both into one padded
    table and ``sampling.kernels.unpad``, without the table.

    Example:
        >>> own = (torch.tensor([5, 6, 7]), torch.tensor([2, 1]))  # node 0: 5, 6; node 2: 7
        >>> table = torch.tensor([[-1, 9]], dtype=torch.int32)   # node 1: 9
        >>> [t.tolist() for t in merge_rows(3, torch.tensor([0, 2]), own, torch.tensor([1]), table)]
        [[5, 6, 9, 7], [2, 1, 1]]
    """
    values, counts = _kernels().merge_rows(int(num_nodes), own_idx.numpy(), own[0].numpy(), own[1].numpy(),
                                           remote_idx.numpy(), table.numpy())
    return torch.from_numpy(values), torch.from_numpy(counts)


def split_range(nodes: Tensor, lo: int, hi: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(own_idx, own local ids, remote_idx, remote ids)`` of ``nodes`` (int64) for a part owning ids
    ``lo <= v < hi``, in one pass: the positions of the nodes inside the range and ``v - lo``, then
    the positions and ids of the rest, each in order.

    Example:
        >>> [t.tolist() for t in split_range(torch.tensor([7, 2, 5, 9]), 4, 8)]
        [[0, 2], [3, 1], [1, 3], [2, 9]]
    """
    return tuple(torch.from_numpy(a) for a in _kernels().split_range(nodes.numpy(), int(lo), int(hi)))  # type: ignore[return-value]


def block_index(counts: Tensor, total: int) -> tuple[Tensor, Tensor]:
    """``(dst, indptr)`` of a block whose ``total`` edges come grouped by destination, ``counts[i]`` for
    destination ``i``: each edge's destination and the CSR row pointer, in one pass (torch makes a
    ``repeat_interleave`` and a cumulative sum).

    Example:
        >>> [t.tolist() for t in block_index(torch.tensor([2, 0, 1]), 3)]
        [[0, 0, 2], [0, 2, 2, 3]]
    """
    dst, indptr = _kernels().block_index(counts.numpy(), int(total))
    return torch.from_numpy(dst), torch.from_numpy(indptr)
