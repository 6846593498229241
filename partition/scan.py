"""One-hop parts written by sequential scans: every part at once, bounded memory, graphs larger than RAM.

``write_partition_files`` uses this for ``halo_hops = 1`` (the default). Instead of gathering each
part's rows from the whole graph (which pages in the graph once per part and holds a part's
edges several times over), it reads the CSR and the features front to back in blocks of rows,
twice for the CSR and once for the features:

1. halo marks: each block's cut edges mark their sources as halo nodes of the destination's
   part (a boolean row per part, over new ids, a group of parts per pass when ``P x N`` bytes
   exceed ``MARK_BYTES``); a part's halo is then its marked nodes in new-id order;
2. rows: each block's edges go, in order, to their destination's part as local ids (inner
   nodes first, then the halo's position), with the block's feature rows, appended through
   ``graphdist.data.npy.NpyWriter`` (hashed as written).

Within a part, inner nodes keep their original order (``Relabel`` sorts parts stably), which is
the scan's order: the files are byte for byte what the per-part builder (``partition/halo.py``)
writes. Blocks of a memory-mapped graph are released after use (``graphdist.data.npy.release``),
so a scan of a 4 GB feature map does not leave 4 GB resident. Memory: a few ``N``-sized id arrays
plus one block (``BLOCK_EDGES`` edges, ``BLOCK_BYTES`` of features).

Example:
    >>> import tempfile, pathlib
    >>> from graphdist.testing import tiny_graph, tiny_partition
    >>> from partition.halo import Relabel, build_part
    >>> from partition.csr import graph_arrays
    >>> g, parts = tiny_graph(), tiny_partition().numpy()
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> counts = write_one_hop_parts(root, g, parts, 2, Relabel.from_parts(parts, 2), {})
    >>> expected = build_part(*graph_arrays(g), Relabel.from_parts(parts, 2), 1)
    >>> bool((np.load(root / "part-1/indices.npy") == expected.indices).all()), counts[1]["num_halo"]
    (True, 2)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from graphdist.data.graph import Graph, counts_to_indptr
from graphdist.data.npy import NpyWriter, release
from partition.csr import graph_arrays
from partition.files import save_array
from partition.halo import Relabel

BLOCK_EDGES = 1 << 23  # edges per block: ~8M, a few hundred MB of temporaries
BLOCK_BYTES = 1 << 27  # feature bytes per block: 128 MB
MARK_BYTES = 1 << 29  # halo marks of all parts in one pass up to 512 MB (else groups of parts)


def write_one_hop_parts(
    root: Path,
    graph: Graph,
    parts: np.ndarray,
    num_parts: int,
    relabel: Relabel,
    files: dict[str, dict[str, Any]],
    on_block: Optional[Callable[[int], None]] = None,
    save: Callable[[Path, str, np.ndarray, dict[str, dict[str, Any]]], None] = save_array,
) -> list[dict[str, Any]]:
    """Writes every part's structure and features (halo depth 1) into ``root``; returns each part's counts.

    Args:
        root: the staging directory.
        graph: the whole graph (original ids; its arrays may be memory maps).
        parts: int64 ``[N]`` part of every node.
        num_parts: P.
        relabel: the id maps (``Relabel.from_parts(parts, P)``).
        files: the checksummed file list, updated.
        on_block: progress callback, called with the rows of each block of either scan (2 N in all).
        save: writes one whole array file and records it in ``files`` (default ``partition.files.save_array``;
            ``write_partition_files`` hands in the one it writes every other file with).

    Returns:
        Per part the structure counts ``meta.json`` records (``partition.format._part_counts``'s).
    """
    indptr, indices = graph_arrays(graph)
    n = graph.num_nodes
    degree = np.diff(indptr)
    offsets = relabel.part_offsets
    inner_counts = np.diff(offsets)
    blocks = _row_blocks(indptr, graph.num_features * 4 if graph.x is not None else 0)
    halos = _halos(indices, indptr, blocks, parts, relabel.new_ids, num_parts, n, on_block)
    counts = [_start_part(root, p, relabel, degree, halos[p], files, save) for p in range(num_parts)]
    edges = np.bincount(parts, weights=degree, minlength=num_parts).astype(np.int64)
    opened: list[NpyWriter] = []  # every file this scan writes: removed, all of them, if it fails

    def writer(path: Path, shape: tuple[int, ...], dtype: Any) -> NpyWriter:
        opened.append(NpyWriter(path, shape, dtype))
        return opened[-1]

    try:
        writers = [writer(root / f"part-{p}/indices.npy", (int(edges[p]),), np.int64) for p in range(num_parts)]
        # A typed graph's relations go with their edges, in the same order (one scan, no position arrays).
        relations = (_Relations(root, graph.edge_type.numpy(), graph.schema.num_relations, edges, writer)
                     if graph.typed else None)
        features = [writer(root / f"part-{p}/x.npy", (int(inner_counts[p]), graph.num_features), np.float32)
                    for p in range(num_parts)] if graph.x is not None else []
        for a, b in blocks:
            _scan_rows(a, b, indptr, indices, parts, relabel, halos, writers, counts, relations)
            if features:
                _scan_features(a, b, graph, parts, features)
            if on_block is not None:
                on_block(b - a)
        for p, w in enumerate(writers):
            w.close()
            files[f"part-{p}/indices.npy"] = {"sha256": w.sha256, "bytes": w.size}
        if relations is not None:
            relations.close(files, counts)
        for p, w in enumerate(features):
            w.close()
            files[f"part-{p}/x.npy"] = {"sha256": w.sha256, "bytes": w.size}
    except BaseException:
        for w in opened:
            w.__exit__(RuntimeError, None, None)
        raise
    return counts


def _row_blocks(indptr: np.ndarray, row_bytes: int) -> list[tuple[int, int]]:
    """Row ranges holding at most ``BLOCK_EDGES`` edges and ``BLOCK_BYTES`` of feature rows (one row at least)."""
    n = indptr.size - 1
    rows = max(1, BLOCK_BYTES // max(row_bytes, 1)) if row_bytes else n
    out, a = [], 0
    while a < n:
        b = min(n, a + rows, max(a + 1, int(np.searchsorted(indptr, indptr[a] + BLOCK_EDGES, side="right")) - 1))
        out.append((a, b))
        a = b
    return out


def _block(indptr: np.ndarray, indices: np.ndarray, parts: np.ndarray, a: int, b: int) -> tuple[np.ndarray, ...]:
    """A block's edges: source ids (int64), the destination's part, the source's part."""
    lo, hi = int(indptr[a]), int(indptr[b])
    view = indices[lo:hi]
    src = view.astype(np.int64)  # a copy: the mapped pages can go
    release(view, unwritten=True)
    dst_part = np.repeat(parts[a:b], np.diff(indptr[a : b + 1]))
    return src, dst_part, parts[src]


def _halos(indices: np.ndarray, indptr: np.ndarray, blocks: list[tuple[int, int]], parts: np.ndarray,
           new_ids: np.ndarray, num_parts: int, n: int,
           on_block: Optional[Callable[[int], None]] = None) -> list[np.ndarray]:
    """Each part's halo: the sources of its cut in-edges, as sorted new ids (one CSR scan per group of parts)."""
    group = max(1, MARK_BYTES // max(n, 1))
    groups = -(-num_parts // group)
    halos: list[np.ndarray] = []
    for first in range(0, num_parts, group):
        last = min(num_parts, first + group)
        marks = np.zeros((last - first, n), dtype=bool)
        for a, b in blocks:
            src, dst_part, src_part = _block(indptr, indices, parts, a, b)
            cut = (src_part != dst_part) & (dst_part >= first) & (dst_part < last)
            marks[dst_part[cut] - first, new_ids[src[cut]]] = True
            if on_block is not None:  # the rows once over all groups
                on_block((b - a) // groups + (1 if first == 0 else 0) * ((b - a) % groups))
        halos += [np.flatnonzero(row) for row in marks]
    return halos


def _start_part(root: Path, p: int, relabel: Relabel, degree: np.ndarray, halo: np.ndarray,
                files: dict[str, dict[str, Any]], save: Callable[..., None]) -> dict[str, Any]:
    """A part's small files (indptr, global ids, halo owners) and its counts, before the scan fills them."""
    lo, hi = int(relabel.part_offsets[p]), int(relabel.part_offsets[p + 1])
    row_counts = degree[relabel.orig_ids[lo:hi]]
    (root / f"part-{p}").mkdir(parents=True, exist_ok=True)
    save(root, f"part-{p}/indptr.npy", counts_to_indptr(row_counts), files)
    save(root, f"part-{p}/global_ids.npy", np.concatenate([np.arange(lo, hi, dtype=np.int64), halo]), files)
    save(root, f"part-{p}/halo_owner.npy", relabel.owner(halo), files)
    edges = int(row_counts.sum())
    return {"num_inner": hi - lo, "num_halo": int(halo.size), "halo_by_hop": [int(halo.size)], "num_rows": hi - lo,
            "num_edges": edges, "num_inner_edges": edges, "num_cut_edges": 0,
            "edges_from_parts": [0] * int(relabel.num_parts)}


def _scan_rows(a: int, b: int, indptr: np.ndarray, indices: np.ndarray, parts: np.ndarray, relabel: Relabel,
               halos: list[np.ndarray], writers: list[NpyWriter], counts: list[dict[str, Any]],
               relations: Optional["_Relations"] = None) -> None:
    """Appends the block's edges to their destination's part, as local ids (and their relations), and counts
    them by source part."""
    src, dst_part, src_part = _block(indptr, indices, parts, a, b)
    rel = relations.block(int(indptr[a]), int(indptr[b])) if relations is not None else None
    order = np.argsort(dst_part.astype(np.int32), kind="stable")  # radix sort: keeps each part's CSR order
    bounds = np.searchsorted(dst_part[order], np.arange(len(writers) + 1))
    new = relabel.new_ids[src]
    for p in np.flatnonzero(np.diff(bounds)):
        sel = order[bounds[p] : bounds[p + 1]]
        g, owner = new[sel], src_part[sel]
        inner = owner == p
        local = np.where(inner, g - relabel.part_offsets[p],
                         counts[p]["num_inner"] + np.searchsorted(halos[p], g))
        writers[p].write(local)
        counts[p]["num_cut_edges"] += int(sel.size - np.count_nonzero(inner))
        by_part = np.bincount(owner, minlength=len(writers))
        counts[p]["edges_from_parts"] = [x + int(y) for x, y in zip(counts[p]["edges_from_parts"], by_part)]
        if rel is not None:
            relations.add(p, rel[sel], inner)


class _Relations:
    """Each part's ``edge_type.npy``, written beside its indices, and its in-edges per relation (all, and
    those from another part: the stats' cut per relation)."""

    def __init__(self, root: Path, edge_type: np.ndarray, num_relations: int, edges: np.ndarray,
                 writer: Callable[..., NpyWriter] = NpyWriter) -> None:
        self.edge_type, self.num_relations = edge_type, num_relations
        self.writers = [writer(root / f"part-{p}/edge_type.npy", (int(e),), edge_type.dtype)
                        for p, e in enumerate(edges)]
        self.edges = np.zeros((len(edges), num_relations), dtype=np.int64)
        self.cut = np.zeros_like(self.edges)

    def block(self, lo: int, hi: int) -> np.ndarray:
        view = self.edge_type[lo:hi]
        rel = np.array(view)  # a copy: the mapped pages can go
        release(view, unwritten=True)
        return rel

    def add(self, p: int, rel: np.ndarray, inner: np.ndarray) -> None:
        self.writers[p].write(rel)
        self.edges[p] += np.bincount(rel, minlength=self.num_relations)
        self.cut[p] += np.bincount(rel[~inner], minlength=self.num_relations)

    def close(self, files: dict[str, dict[str, Any]], counts: list[dict[str, Any]]) -> None:
        for p, w in enumerate(self.writers):
            w.close()
            files[f"part-{p}/edge_type.npy"] = {"sha256": w.sha256, "bytes": w.size}
            counts[p].update(relation_edges=self.edges[p].tolist(), relation_cut=self.cut[p].tolist())


def _scan_features(a: int, b: int, graph: Graph, parts: np.ndarray, writers: list[NpyWriter]) -> None:
    rows = graph.x[a:b].numpy()
    block_parts = parts[a:b]
    for p in np.unique(block_parts):
        writers[p].write(rows[block_parts == p])
    release(rows, unwritten=True)


__all__ = ["BLOCK_BYTES", "BLOCK_EDGES", "MARK_BYTES", "write_one_hop_parts"]
