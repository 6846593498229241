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


# Both kernels work in two passes: Floyd's offsets for every node (arithmetic only), then one
# tight loop of reads from ``indices``. Interleaving the two left each row's reads waiting on the
# previous row's draws: on a 1M-node graph a 120,000-node hop took 19-21 ms that way against
# torch's 12.4-12.8 ms, whose gathers are such tight loops.
@jit
def positions(starts: Any, deg: Any, u: Any, k: int) -> Any:
    """CSR positions of every node's draws, grouped by node in order, and each node's count."""
    n = starts.shape[0]
    counts = np.minimum(deg, k)
    pos = np.empty(counts.sum(), np.int64)
    chosen = np.empty(k, np.int64)
    e = 0
    for i in range(n):
        if deg[i] <= k:  # all neighbours, in order
            for t in range(deg[i]):
                pos[e + t] = starts[i] + t
        else:
            floyd_row(u, i, deg[i], k, chosen)
            for s in range(k):
                pos[e + s] = starts[i] + chosen[s]
        e += counts[i]
    return pos, counts


@jit
def sampled_values(indices: Any, starts: Any, deg: Any, u: Any, k: int) -> Any:
    """Every node's sampled neighbours (``indices``' dtype), grouped by node in order, and each node's count."""
    pos, counts = positions(starts, deg, u, k)
    values = np.empty(pos.shape[0], indices.dtype)
    for t in range(pos.shape[0]):
        values[t] = indices[pos[t]]
    return values, counts


@jit
def sample_padded(indices: Any, starts: Any, deg: Any, u: Any, k: int) -> Any:
    values, counts = sampled_values(indices, starts, deg, u, k)
    n = starts.shape[0]
    out = np.full((n, k), -1, indices.dtype)
    e = 0
    for i in range(n):  # a row with fewer neighbours fills its last slots, as the torch kernel pads
        for t in range(counts[i]):
            out[i, k - counts[i] + t] = values[e + t]
        e += counts[i]
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


@jit
def merge_rows(n: int, own_idx: Any, own: Any, own_counts: Any, remote_idx: Any, table: Any) -> Any:
    # DistNeighborSource's assembly and unpad as one loop: node own_idx[i] gets own row i
    # (compact, grouped by row), node remote_idx[j] the real entries of padded row j, in order.
    k = table.shape[1]
    counts = np.zeros(n, np.int64)
    for i in range(own_idx.shape[0]):
        counts[own_idx[i]] = own_counts[i]
    for j in range(remote_idx.shape[0]):
        c = 0
        for t in range(k):
            if table[j, t] >= 0:
                c += 1
        counts[remote_idx[j]] = c
    starts = np.empty(n, np.int64)
    total = 0
    for p in range(n):
        starts[p] = total
        total += counts[p]
    values = np.empty(total, np.int64)
    e = 0
    for i in range(own_idx.shape[0]):
        s = starts[own_idx[i]]
        for t in range(own_counts[i]):
            values[s + t] = own[e + t]
        e += own_counts[i]
    for j in range(remote_idx.shape[0]):
        s = starts[remote_idx[j]]
        for t in range(k):
            v = table[j, t]
            if v >= 0:
                values[s] = v
                s += 1
    return values, counts


@jit
def split_range(nodes: Any, lo: int, hi: int) -> Any:
    # DistNeighborSource's own/remote split for a part of one id range [lo, hi): positions of the
    # own nodes and their local ids, positions of the others and their ids, each in order.
    n = nodes.shape[0]
    num_own = 0
    for i in range(n):
        if lo <= nodes[i] < hi:
            num_own += 1
    own_idx = np.empty(num_own, np.int64)
    own = np.empty(num_own, np.int64)
    remote_idx = np.empty(n - num_own, np.int64)
    remote = np.empty(n - num_own, np.int64)
    a = 0
    b = 0
    for i in range(n):
        v = nodes[i]
        if lo <= v < hi:
            own_idx[a] = i
            own[a] = v - lo
            a += 1
        else:
            remote_idx[b] = i
            remote[b] = v
            b += 1
    return own_idx, own, remote_idx, remote


@jit
def block_index(counts: Any, total: int) -> Any:
    # A block's destination of every edge (edges grouped by destination) and its CSR row pointer.
    n = counts.shape[0]
    dst = np.empty(total, np.int64)
    indptr = np.empty(n + 1, np.int64)
    indptr[0] = 0
    e = 0
    for i in range(n):
        c = counts[i]
        for t in range(c):
            dst[e + t] = i
        e += c
        indptr[i + 1] = e
    return dst, indptr
