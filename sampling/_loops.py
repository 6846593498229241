"""The numba loops behind ``sampling.compiled`` (imported only once numba is loaded, by ``graphdist._numba``).

Module-level functions, so numba's on-disk cache finds them again in the next process: loops
defined inside a function close over fresh objects each time and were compiled anew (0.7 s).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphdist._numba import jit as _jit

jit = _jit()
_FREE = np.int32(np.iinfo(np.int32).max)  # sampling.relabel's mark of a node not in the batch


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
