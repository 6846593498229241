"""The CSR sampling kernels: up to k in-neighbours per node, vectorised over all nodes at once.

``sample_csr`` returns the draws compacted (``(neighbors, counts)``); ``sample_csr_padded``
returns the same draws as an ``[n, k]`` table padded with ``-1``, which the distributed source
moves and reorders by whole rows before ``unpad`` compacts it. ``CSRNeighborSource`` and the
distributed source both call these, so local and distributed sampling draw alike.

Sampling without replacement uses Robert Floyd's algorithm run across all nodes at once: k
vectorised steps (a loop over the fan-out, never over nodes), each drawing one offset per node
and replacing it by ``j`` when it is already taken. That draws every k-subset of a node's
``d`` neighbours with equal probability, so each neighbour is picked with probability exactly
``k/d``, and costs ``O(n k^2)`` small comparisons instead of a key per edge of the frontier
(which power-law hubs make huge). With replacement: one ``floor(u * d)`` per draw. Hops of
``sampling.compiled.MIN_DRAWS`` draws or more run the same steps as one compiled loop (numba),
which reads the same draws and gives the same neighbours.

Example:
    >>> indptr, indices = torch.tensor([0, 2, 3]), torch.tensor([1, 2, 0])  # row 0: {1, 2}, row 1: {0}
    >>> nb, c = sample_csr(indptr, indices, torch.tensor([0, 1]), 2)
    >>> sorted(nb[:2].tolist()), c.tolist()
    ([1, 2], [2, 1])
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from graphdist.data.graph import ranges
import sampling.compiled as compiled

__all__ = ["compact_by_slot", "sample_csr", "sample_csr_padded", "unpad"]

# Below this many draws per hop Floyd's per-step compare is one broadcast op (overhead-bound).
_SMALL_FLOYD = 1 << 15
# Floyd's steps run on the choosing columns alone when fewer than this share of nodes choose.
_SUBSET_FLOYD = 0.75


def sample_csr(
    indptr: Tensor,
    indices: Tensor,
    nodes: Tensor,
    fanout: int,
    replace: bool = False,
    generator: Optional[torch.Generator] = None,
) -> tuple[Tensor, Tensor]:
    """Samples up to ``fanout`` in-neighbours of each node from CSR arrays; the shared kernel.

    The distributed source calls this on its partition's CSR (with local row ids) too.

    Args:
        indptr: int64 ``[N + 1]``.
        indices: int64 or int32 ``[E]``.
        nodes: int64 ``[n]`` rows to sample.
        fanout: neighbours per node, ``-1`` = all.
        replace: with replacement (nodes with a neighbour get exactly ``fanout``).
        generator: RNG.

    Returns:
        ``(neighbors, counts)``: int64 neighbours grouped by node in ``nodes`` order, and
        int64 ``[n]`` counts.

    Example:
        >>> nb, c = sample_csr(torch.tensor([0, 2, 3]), torch.tensor([1, 2, 0]), torch.tensor([1]), -1)
        >>> nb.tolist(), c.tolist()
        ([0], [1])
    """
    starts = indptr.index_select(0, nodes)
    deg = indptr[1:].index_select(0, nodes).sub_(starts)
    if fanout < 0:
        positions = ranges(starts, deg)
        return _gather_ids(indices, positions), deg
    if _compiled(indices, nodes, fanout, replace):
        return compiled.floyd_sample(indices, starts, deg, _floyd_draws(deg, fanout, generator), padded=False)
    return _sample_fixed(indices, starts, deg, fanout, replace, generator)


def _compiled(indices: Tensor, nodes: Tensor, fanout: int, replace: bool) -> bool:
    """Whether this hop runs ``sampling.compiled``'s loop (the same draws as the torch kernels below)."""
    return not replace and indices.device.type == "cpu" and compiled.enabled(nodes.numel() * fanout)


def _gather_ids(indices: Tensor, positions: Tensor) -> Tensor:
    out = indices.index_select(0, positions)
    return out if out.dtype == torch.int64 else out.to(torch.int64)


def _sampled_positions(
    starts: Tensor, deg: Tensor, k: int, replace: bool, generator: Optional[torch.Generator]
) -> tuple[Tensor, Optional[Tensor]]:
    """``[n, k]`` CSR positions of the draws and the ``[n, k]`` mask of real ones (None: all real).

    Without replacement a node of degree ``d < k`` fills only its last ``d`` slots (see
    ``_floyd``); with replacement a node without neighbours fills none.
    """
    n = deg.numel()
    if replace:
        # float64 keeps floor(u * d) uniform even for hubs with millions of neighbours.
        u = torch.rand((n, k), dtype=torch.float64, generator=generator)
        positions = (u * deg.unsqueeze(1)).to(torch.int64).add_(starts.unsqueeze(1))
        has = deg > 0
        return positions, None if bool(has.all()) else has.unsqueeze(1).expand(n, k)
    # Row-major [n, k] (a row per node, as the padded table): the add writes Floyd's [k, n]
    # steps transposed, so nothing copies them again.
    positions = torch.add(_floyd(deg, k, generator).t(), starts.unsqueeze(1), out=torch.empty((n, k), dtype=torch.int64))
    if bool((deg >= k).all()):
        return positions, None
    return positions, torch.arange(k).unsqueeze(0) >= (k - deg.clamp(max=k)).unsqueeze(1)


def sample_csr_padded(
    indptr: Tensor,
    indices: Tensor,
    nodes: Tensor,
    fanout: int,
    replace: bool = False,
    generator: Optional[torch.Generator] = None,
) -> Tensor:
    """:func:`sample_csr` with a fixed fan-out, as an ``[n, fanout]`` table padded with ``-1``.

    Same draws as ``sample_csr`` with the same generator. No compaction: the distributed
    source moves and reorders whole rows and compacts once, at the end (``unpad``). The table
    has the dtype of ``indices``: int32 ids halve what the distributed source gathers, copies,
    sends and reorders (its tables are the largest arrays of a hop).

    Example:
        >>> sample_csr_padded(torch.tensor([0, 2, 3]), torch.tensor([1, 2, 0]), torch.tensor([1]), 2).tolist()
        [[-1, 0]]
    """
    if fanout < 0:
        raise ValueError(f"fanout: a padded sample needs a fixed fan-out (got {fanout})")
    starts = indptr.index_select(0, nodes)
    deg = indptr[1:].index_select(0, nodes).sub_(starts)
    if indices.numel() == 0:
        return torch.full((nodes.numel(), fanout), -1, dtype=indices.dtype)
    if _compiled(indices, nodes, fanout, replace):
        return compiled.floyd_sample(indices, starts, deg, _floyd_draws(deg, fanout, generator), padded=True)
    positions, real = _sampled_positions(starts, deg, fanout, replace, generator)
    if real is None:
        return indices.index_select(0, positions.reshape(-1)).view(-1, fanout)
    # Padding slots may point outside the array: clamp them into it (in place, cheaper than a
    # masked select or where over the whole table), read whatever is there, then overwrite.
    out = indices.index_select(0, positions.clamp_(0, indices.numel() - 1).view(-1)).view(-1, fanout)
    return out.masked_fill_(~real, -1)


def unpad(table: Tensor) -> tuple[Tensor, Tensor]:
    """``(neighbors, counts)`` of a ``-1``-padded ``[n, k]`` table, rows in order (``sample_csr``'s form,
    int64 whatever the table's dtype).

    Example:
        >>> [t.tolist() for t in unpad(torch.tensor([[-1, 4], [2, 3]]))]
        [[4, 2, 3], [1, 2]]
    """
    n, k = table.shape
    flat = table.reshape(-1)
    real = flat >= 0
    # slot[i]: how many real entries up to and including i (int32: a table holds < 2^31 entries).
    # Its value at each row's end gives the counts (no row sum), and it places every real entry
    # (compact_by_slot). 15% faster than the row sum plus masked_select on the distributed
    # sampler's [400k, 5] tables.
    slot = torch.cumsum(real, 0, dtype=torch.int32)
    ends = slot.view(n, k)[:, -1].to(torch.int64) if k else torch.zeros(n, dtype=torch.int64)
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    total = int(ends[-1]) if n else 0
    if total == flat.numel():
        return flat.to(torch.int64), counts
    return compact_by_slot(flat, slot.mul_(real).to(torch.int64), total).to(torch.int64), counts


def compact_by_slot(values: Tensor, slot: Tensor, count: int) -> Tensor:
    """``values`` whose ``slot`` is 1..``count``, each put at position ``slot - 1``; slot 0 drops a value.

    A stream compaction as one scatter: faster than torch's boolean masks, and deterministic
    because every kept slot is written exactly once (only the dropped slot 0 sees races).

    Example:
        >>> compact_by_slot(torch.tensor([7, 8, 9]), torch.tensor([2, 0, 1]), 2).tolist()
        [9, 7]
    """
    return torch.empty(count + 1, dtype=values.dtype).scatter_(0, slot, values)[1:]


def _sample_fixed(
    indices: Tensor, starts: Tensor, deg: Tensor, k: int, replace: bool, generator: Optional[torch.Generator]
) -> tuple[Tensor, Tensor]:
    positions, real = _sampled_positions(starts, deg, k, replace, generator)
    counts = deg.clamp(max=k) if not replace else torch.where(deg > 0, k, 0)
    if real is None:
        return _gather_ids(indices, positions.reshape(-1)), counts
    return _gather_ids(indices, torch.masked_select(positions, real)), counts


def _floyd(deg: Tensor, k: int, generator: Optional[torch.Generator]) -> Tensor:
    """``[k, n]`` int32 offsets; the last ``min(deg[i], k)`` rows of column ``i`` are a uniform
    ``min(deg[i], k)``-subset of ``range(deg[i])`` (all of it when ``deg[i] <= k``).

    Floyd: for j = d-k .. d-1 draw t in [0, j]; take t unless already taken, else take j. Run on
    every node at once, steps with ``j < 0`` (only when ``d < k``) write ``j`` itself: negative,
    so never mistaken for a taken offset, and the remaining steps are Floyd for a ``d``-subset
    of ``d``, i.e. all neighbours. One code path for small and large degrees, no compaction.
    Row-major ``[k, n]`` keeps each step's compare and write contiguous.
    """
    n = deg.numel()
    # int32 offsets halve the bandwidth of the O(k^2) comparisons; degrees stay below 2^31.
    deg32 = deg.to(torch.int32)
    u = _floyd_draws(deg, k, generator)
    # All k draws at once (few large ops instead of many small ones); row s is step s.
    j = (deg32 - k).unsqueeze(0) + torch.arange(k, dtype=torch.int32).unsqueeze(1)
    # u * (j + 1) can round up to j + 1 in floating point; the min maps that to j.
    chosen = torch.minimum(u.mul_(j + 1).to(torch.int32), j)
    # A node with at most k neighbours takes them all: its column is j itself (padding, then
    # offsets 0..d-1 in order), with no compares. Where such nodes are many (an induced
    # subgraph's low degrees) only the others run Floyd's steps; the draws stay the same.
    choosing = deg32 > k
    chooser = int(choosing.sum())
    if chooser < _SUBSET_FLOYD * n:
        if chooser:
            cols = choosing.nonzero().view(-1)
            picked = _floyd_steps(chosen.index_select(1, cols), j.index_select(1, cols), k)
            return j.index_copy_(1, cols, picked)
        return j
    return _floyd_steps(chosen, j, k)


def _floyd_draws(deg: Tensor, k: int, generator: Optional[torch.Generator]) -> Tensor:
    """Floyd's ``[k, n]`` uniform draws: float32, or float64 where a hub has more than 2^24 neighbours
    (float32 resolves ``u * (j + 1)`` to single offsets only below that)."""
    precise = deg.numel() > 0 and int(deg.max()) > (1 << 24)
    return torch.rand((k, deg.numel()), generator=generator, dtype=torch.float64 if precise else torch.float32)


def _floyd_steps(chosen: Tensor, j: Tensor, k: int) -> Tensor:
    """Floyd's k steps over ``chosen``'s columns in place: a taken draw becomes ``j``."""
    small = chosen.numel() < _SMALL_FLOYD
    for step in range(1, k):
        t = chosen[step]
        if small:
            # Few nodes: per-op overhead dominates, so one broadcast compare per step.
            taken = (chosen[:step] == t).any(dim=0)
        else:
            # Many nodes: chained == / |= over the taken rows beats a (step, n) compare + any.
            taken = chosen[0] == t
            for row in range(1, step):
                taken |= chosen[row] == t
        torch.where(taken, j[step], t, out=t)
    return chosen
