"""The numba loop behind :func:`graphdist.models.gcn.gcn_norm_block` (imported only once numba is loaded).

Module level, so numba's on-disk cache finds it again in the next process.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphdist._numba import jit as _jit

jit = _jit()


@jit
def gcn_norm(indptr: Any, edge_src: Any, degree: Any, num_dst: int) -> Any:
    one = np.float32(1.0)
    counts = np.zeros(num_dst, np.int64)  # sampled neighbours of each row, its own loop left out
    for v in range(num_dst):
        for e in range(indptr[v], indptr[v + 1]):
            if edge_src[e] != v:
                counts[v] += 1
    new_indptr = np.empty(num_dst + 1, np.int64)
    new_indptr[0] = 0
    for v in range(num_dst):
        new_indptr[v + 1] = new_indptr[v] + counts[v] + 1
    total = new_indptr[num_dst]
    src, dst = np.empty(total, np.int64), np.empty(total, np.int64)
    weight = np.empty(total, np.float32)
    inv_sqrt = np.empty(degree.shape[0], np.float32)  # once per source, as the torch code's rsqrt
    for u in range(degree.shape[0]):
        inv_sqrt[u] = one / np.sqrt(degree[u] + one)
    for v in range(num_dst):
        inv_dst = inv_sqrt[v]
        row_factor = degree[v] / np.float32(max(counts[v], 1)) * inv_dst
        pos = new_indptr[v]
        src[pos], dst[pos], weight[pos] = v, v, inv_dst * inv_dst
        for e in range(indptr[v], indptr[v + 1]):
            u = edge_src[e]
            if u != v:
                pos += 1
                src[pos], dst[pos] = u, v
                weight[pos] = inv_sqrt[u] * row_factor
    return src, dst, new_indptr, weight
