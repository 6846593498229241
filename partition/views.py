"""Whole-graph views assembled from a partition directory's parts: the part adjacency, the full CSR.

Readers over every part (the writer and the per-part reader live in ``partition.format``):
``part_edges`` for placement (which parts to keep on one worker, remote traffic between parts)
and ``load_structure`` for ``--replicate structure|graph`` (every worker samples any node).
"""

from __future__ import annotations

from pathlib import Path

import torch

from partition.format import PathLike, load_partition, read_meta
from partition.halo import edges_by_source_part

__all__ = ["load_structure", "part_edges"]


def part_edges(path: PathLike) -> list[list[int]]:
    """``part_edges[p][q]``: in-edges of part p's inner nodes whose source is in part q.

    From ``meta.json`` when the partition wrote it; computed from each part's CSR and halo
    owner map for directories written before it did.

    Example:
        >>> import tempfile
        >>> from graphdist.testing import tiny_graph
        >>> from partition.api import partition
        >>> m = part_edges(partition(tiny_graph(), 2, method="random", out=tempfile.mkdtemp() + "/p"))
        >>> sum(map(sum, m)) == tiny_graph().num_edges
        True
    """
    meta = read_meta(Path(path))
    if "part_edges" in meta:
        return [[int(c) for c in row] for row in meta["part_edges"]]
    num_parts = int(meta["num_parts"])
    rows = []
    for p in range(num_parts):
        part = load_partition(path, p, verify=False)
        rows.append(edges_by_source_part(part.indptr.numpy(), part.indices.numpy(), part.halo_owner.numpy(),
                                         part.num_inner, num_parts, p))
    return rows


def load_structure(path: PathLike, with_types: bool = False) -> tuple[torch.Tensor, ...]:
    """The whole graph's in-neighbour CSR over global ids, assembled from every part's inner rows.

    For ``--structure replicated``: every worker samples any node's neighbours itself (no
    sampling exchange; seeds can move between workers with their sampling work), while features
    stay partitioned. Part ``p``'s inner nodes are the global range ``part_offsets[p]..``, so the
    rows concatenate in part order. Costs ``8 * (num_nodes + num_edges)`` bytes per worker.
    ``with_types``: a typed graph's edge relations come third (None for an untyped graph).
    Checksums are not verified here: each part's owner verifies its own files.

    Example:
        >>> import tempfile
        >>> from graphdist.testing import tiny_graph
        >>> from partition.api import partition
        >>> indptr, indices = load_structure(partition(tiny_graph(), 2, method="random", out=tempfile.mkdtemp() + "/p"))
        >>> int(indptr[-1]) == tiny_graph().num_edges, indptr.numel() - 1
        (True, 10)
    """
    meta = read_meta(Path(path))
    counts, columns, types = [], [], []
    for p in range(int(meta["num_parts"])):
        part = load_partition(path, p, verify=False)
        indptr = part.indptr[: part.num_inner + 1].to(torch.int64)
        counts.append(indptr[1:] - indptr[:-1])
        columns.append(part.global_indices(inner_only=True))
        if with_types and part.edge_type is not None:
            types.append(part.edge_type[: int(indptr[-1])])
    degrees = torch.cat(counts)
    indptr = torch.zeros(degrees.numel() + 1, dtype=torch.int64)
    torch.cumsum(degrees, 0, out=indptr[1:])
    if with_types:
        return indptr, torch.cat(columns), torch.cat(types) if types else None
    return indptr, torch.cat(columns)
