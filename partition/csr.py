"""Numpy CSR helpers shared by the partitioners, halo construction and statistics.

Everything here works on numpy views of a `Graph`'s tensors (no copies where
the dtype already fits) because pymetis and ``np.save`` want numpy, and numpy
sorts in place where torch would allocate an index tensor next to the values.
"""

from __future__ import annotations

import numpy as np

from graphdist.data.graph import Graph, counts_to_indptr  # one implementation, numpy or torch


def graph_arrays(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """``(indptr, indices)`` of ``graph`` as numpy arrays sharing its memory.

    Example:
        >>> from graphdist.testing import tiny_graph
        >>> indptr, indices = graph_arrays(tiny_graph())
        >>> int(indptr[-1]) == indices.size
        True
    """
    return graph.indptr.numpy(), graph.indices.numpy()


def ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + c)`` for every ``(s, c)``, vectorised.

    Example:
        >>> ranges(np.array([5, 0]), np.array([2, 3])).tolist()
        [5, 6, 0, 1, 2]
    """
    counts = counts.astype(np.int64, copy=False)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    shift = starts.astype(np.int64, copy=False) - counts_to_indptr(counts)[:-1]
    out = np.repeat(shift, counts)
    out += np.arange(total, dtype=np.int64)
    return out


def row_ids(indptr: np.ndarray) -> np.ndarray:
    """The row (destination) of every stored edge, int64."""
    return np.repeat(np.arange(indptr.size - 1, dtype=np.int64), np.diff(indptr))


def gather_rows(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The in-neighbours of ``rows``: ``(counts per row, concatenated neighbour ids as int64)``."""
    counts = indptr[rows + 1] - indptr[rows]
    cols = indices[ranges(indptr[rows], counts)].astype(np.int64, copy=False)
    return counts, cols


def symmetric_csr(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """int64 ``(xadj, adjncy)`` of the undirected simple graph METIS expects.

    Every edge is stored in both directions, once, with no self loops. When
    ``graph`` already is such a graph (the common case: loaders store both
    directions) its own arrays are returned without a copy, so METIS runs
    zero-copy (pymetis's index type is int64 here).

    Example:
        >>> from graphdist.testing import tiny_graph
        >>> xadj, adjncy = symmetric_csr(tiny_graph())
        >>> xadj.size - 1, adjncy.size
        (10, 24)
    """
    indptr, indices = graph_arrays(graph)
    n = graph.num_nodes
    if _is_symmetric_simple(indptr, indices, n):
        return indptr, indices.astype(np.int64, copy=False)
    dst = row_ids(indptr)
    src = indices.astype(np.int64, copy=False)
    keep = src != dst
    keys = np.concatenate([dst[keep] * n + src[keep], src[keep] * n + dst[keep]])
    del dst, src, keep
    keys = np.unique(keys)  # sorted by row, then column; duplicates gone
    rows = keys // n
    keys -= rows * n  # the column ids, in place: one large array fewer
    xadj = counts_to_indptr(np.bincount(rows, minlength=n))
    return xadj, keys


def _is_symmetric_simple(indptr: np.ndarray, indices: np.ndarray, n: int) -> bool:
    """True when every row is strictly sorted, loop-free, and the edge set equals its reverse."""
    degrees = np.diff(indptr)
    # Cheap necessary condition first: in-degree must equal out-degree everywhere.
    if indices.size and not np.array_equal(np.bincount(indices, minlength=n), degrees):
        return False
    dst = row_ids(indptr)
    src = indices.astype(np.int64, copy=False)
    if np.any(src == dst):
        return False
    keys = dst * n + src
    if keys.size > 1 and not bool(np.all(keys[1:] > keys[:-1])):
        return False  # unsorted rows or duplicate edges
    reverse = src * n + dst
    del src, dst
    reverse.sort()
    return bool(np.array_equal(keys, reverse))


def cut_edges(indptr: np.ndarray, indices: np.ndarray, parts: np.ndarray) -> int:
    """Number of stored (directed) edges whose two ends lie in different parts.

    Rows are processed in blocks so the temporary arrays stay bounded on large graphs.

    Example:
        >>> from graphdist.testing import tiny_graph, tiny_partition
        >>> g = tiny_graph()
        >>> cut_edges(*graph_arrays(g), tiny_partition().numpy())
        4
    """
    n = indptr.size - 1
    total = 0
    block = 1 << 20
    for start in range(0, n, block):
        stop = min(start + block, n)
        lo, hi = int(indptr[start]), int(indptr[stop])
        dst_parts = np.repeat(parts[start:stop], np.diff(indptr[start : stop + 1]))
        total += int(np.count_nonzero(parts[indices[lo:hi]] != dst_parts))
    return total
