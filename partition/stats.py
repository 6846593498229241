"""Partition quality: edge cut, balance, replication, label-distribution distance.

Stats of a written partition come from its ``meta.json`` alone (the writer
records per-part counts and label histograms), so ``graphdist-partition
--stats DIR`` reads no array. Stats of an in-memory ``(graph, parts)`` pair
compute the same numbers directly (1-hop halo).

Example:
    >>> from graphdist.testing import tiny_graph, tiny_partition
    >>> s = partition_stats(tiny_graph(), tiny_partition())
    >>> s.inner_nodes, s.halo_nodes, round(s.edge_cut, 3)
    ([5, 5], [2, 2], 0.167)
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np
import torch

from graphdist.data.graph import Graph
from partition.csr import graph_arrays


@dataclass
class PartitionStats:
    """Per-part counts and whole-partition quality figures.

    ``edges`` are the in-edges of each part's inner nodes (directed counts);
    ``edge_cut`` is the fraction of all edges whose ends lie in different parts;
    balances are max/mean; ``replication_factor`` is (inner + halo) / N;
    ``label_tvd[p]`` is the total variation distance between part p's label
    distribution and the global one (None for a part without labelled nodes). For multi-label
    ``y`` the distribution is that of label occurrences: the share of all (node, label) pairs
    that carry each label (a part whose nodes carry labels in the global proportions scores 0,
    however many labels each node has).
    """

    num_parts: int
    num_nodes: int
    num_edges: int
    inner_nodes: list[int]
    halo_nodes: list[int]
    edges: list[int]
    train_nodes: Optional[list[int]]
    cut_edges: int
    edge_cut: float
    node_balance: float
    edge_balance: float
    train_balance: Optional[float]
    replication_factor: float
    label_tvd: Optional[list[Optional[float]]]
    mean_label_tvd: Optional[float]
    max_label_tvd: Optional[float]
    # A typed graph's (graphdist.data.hetero): type and relation names, nodes of each type per part
    # ([part][type]), inner in-edges of each relation per part and those of them cut ([part][relation]).
    node_types: Optional[list[str]] = None
    type_nodes: Optional[list[list[int]]] = None
    relations: Optional[list[str]] = None
    relation_edges: Optional[list[list[int]]] = None
    relation_cut: Optional[list[list[int]]] = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def table(self) -> str:
        """A fixed-width table, one row per part, then one summary line."""
        return format_table(self)


def partition_stats(
    source: Union[str, os.PathLike, Graph], parts: Optional[Any] = None, num_parts: Optional[int] = None
) -> PartitionStats:
    """Statistics of a partition directory, or of a graph and its part assignment.

    Args:
        source: a partition directory, or a `Graph`.
        parts: int ``[N]`` part per node (required with a graph).
        num_parts: number of parts (default ``max(parts) + 1``).

    Returns:
        `PartitionStats`.

    Raises:
        PartitionFormatError: for a directory with a bad ``meta.json``.
        ValueError: a graph without ``parts``.

    Example:
        >>> from graphdist.testing import tiny_graph, tiny_partition
        >>> partition_stats(tiny_graph(), tiny_partition()).node_balance
        1.0
    """
    if isinstance(source, Graph):
        if parts is None:
            raise ValueError("parts: required when source is a Graph (got None)")
        return _stats_from_graph(source, parts, num_parts)
    from partition.format import read_meta

    meta = read_meta(Path(source))
    return _summarise(meta["num_nodes"], meta["num_edges"], meta["parts"], meta.get("schema"))


def _stats_from_graph(graph: Graph, parts: Any, num_parts: Optional[int]) -> PartitionStats:
    parts = parts.numpy() if isinstance(parts, torch.Tensor) else np.asarray(parts)
    parts = parts.astype(np.int64, copy=False)
    n = graph.num_nodes
    p_count = int(num_parts if num_parts is not None else (parts.max() + 1 if n else 1))
    indptr, indices = graph_arrays(graph)
    dst_part = np.repeat(parts, np.diff(indptr))
    src = indices.astype(np.int64, copy=False)
    cut = parts[src] != dst_part
    # Halo of part p: distinct sources outside p of edges into p.
    keys = np.unique(dst_part[cut] * n + src[cut])
    halo = np.bincount(keys // max(n, 1), minlength=p_count)
    degrees = np.diff(indptr)
    edges = np.bincount(parts, weights=degrees, minlength=p_count).astype(np.int64)
    cut_per_part = np.bincount(dst_part[cut], minlength=p_count)
    inner = np.bincount(parts, minlength=p_count)
    train = None if graph.train_mask is None else np.bincount(parts[graph.train_mask.numpy()], minlength=p_count)
    labels = None
    if graph.y is not None and graph.multilabel:
        y = graph.y.numpy()
        labels = np.stack([y[parts == p].sum(axis=0, dtype=np.int64) for p in range(p_count)])
    elif graph.y is not None:
        y = graph.y.numpy()
        ok = y >= 0
        c = max(graph.num_classes, 1)
        labels = np.bincount(parts[ok] * c + y[ok], minlength=p_count * c).reshape(p_count, c)
    rows: list[dict[str, Any]] = []
    for p in range(p_count):
        row: dict[str, Any] = {
            "num_inner": int(inner[p]),
            "num_halo": int(halo[p]),
            "num_inner_edges": int(edges[p]),
            "num_cut_edges": int(cut_per_part[p]),
            "num_train": None if train is None else int(train[p]),
        }
        if labels is not None:
            row["label_counts"] = labels[p].tolist()
        rows.append(row)
    if graph.typed:  # nodes of each type, and in-edges and cut edges of each relation, per part
        t, r = graph.schema.num_types, graph.schema.num_relations
        types = graph.schema.node_type(torch.arange(n)).numpy()
        rel = graph.edge_type.numpy().astype(np.int64)
        per_type = np.bincount(parts * t + types, minlength=p_count * t).reshape(p_count, t)
        per_rel = np.bincount(dst_part * r + rel, minlength=p_count * r).reshape(p_count, r)
        per_cut = np.bincount(dst_part[cut] * r + rel[cut], minlength=p_count * r).reshape(p_count, r)
        for p, row in enumerate(rows):
            row.update(type_counts=per_type[p].tolist(), relation_edges=per_rel[p].tolist(),
                       relation_cut=per_cut[p].tolist())
    return _summarise(n, graph.num_edges, rows, graph.schema.to_dict() if graph.typed else None)


def _summarise(num_nodes: int, num_edges: int, rows: list[dict[str, Any]],
               schema: Optional[dict[str, Any]] = None) -> PartitionStats:
    inner = [int(r["num_inner"]) for r in rows]
    halo = [int(r["num_halo"]) for r in rows]
    edges = [int(r.get("num_inner_edges", r.get("num_edges", 0))) for r in rows]
    train = [r.get("num_train") for r in rows]
    train_list = None if any(t is None for t in train) else [int(t) for t in train]
    cut = sum(int(r["num_cut_edges"]) for r in rows)
    tvd = _label_tvd([r.get("label_counts") for r in rows])
    known = [t for t in tvd if t is not None] if tvd is not None else []
    return PartitionStats(
        num_parts=len(rows),
        num_nodes=num_nodes,
        num_edges=num_edges,
        inner_nodes=inner,
        halo_nodes=halo,
        edges=edges,
        train_nodes=train_list,
        cut_edges=cut,
        edge_cut=cut / max(num_edges, 1),
        node_balance=_balance(inner),
        edge_balance=_balance(edges),
        train_balance=None if train_list is None else _balance(train_list),
        replication_factor=(sum(inner) + sum(halo)) / max(num_nodes, 1),
        label_tvd=tvd,
        mean_label_tvd=float(np.mean(known)) if known else None,
        max_label_tvd=float(np.max(known)) if known else None,
        **_typed_fields(rows, schema),
    )


def _typed_fields(rows: list[dict[str, Any]], schema: Optional[dict[str, Any]]) -> dict[str, Any]:
    """The typed statistics of the parts' rows (partition format 3); none for an untyped graph."""
    if not schema or any("relation_edges" not in r for r in rows):
        return {}
    return {"node_types": list(schema["node_types"]), "relations": list(schema["relations"]),
            "type_nodes": [list(r["type_counts"]) for r in rows],
            "relation_edges": [list(r["relation_edges"]) for r in rows],
            "relation_cut": [list(r["relation_cut"]) for r in rows]}


def _balance(values: list[int]) -> float:
    """max / mean; 1.0 is perfect, and an all-zero list counts as balanced."""
    mean = sum(values) / max(len(values), 1)
    return max(values) / mean if mean > 0 else 1.0


def _label_tvd(counts: list[Optional[list[int]]]) -> Optional[list[Optional[float]]]:
    if not counts or any(c is None for c in counts) or not any(sum(c) for c in counts):  # type: ignore[arg-type]
        return None
    tvd = [group_label_tvd(counts, [p]) for p in range(len(counts))]
    return [None if math.isnan(t) else t for t in tvd]


def group_label_tvd(counts: Sequence[Optional[Sequence[int]]], group: Sequence[int]) -> float:
    """Total variation distance between the label mix of parts ``group`` together and the whole graph's.

    ``counts``: per part its label histogram (a partition's ``meta["parts"][p]["label_counts"]``).
    nan when a part has none (link prediction, multi-label) or the group has no labelled node. What
    ``--strategy aggregation`` reports per worker and ``graphdist-plan`` weighs before recommending it.

    Example:
        >>> group_label_tvd([[3, 1], [1, 3]], [0]), group_label_tvd([[3, 1], [1, 3]], [0, 1])
        (0.25, 0.0)
    """
    if not counts or any(c is None for c in counts):
        return float("nan")
    width = max(len(c) for c in counts)  # type: ignore[arg-type]
    mat = np.zeros((len(counts), width), dtype=np.float64)
    for p, c in enumerate(counts):
        mat[p, : len(c)] = c  # type: ignore[arg-type]
    mine = mat[list(group)].sum(axis=0)
    if mine.sum() == 0 or mat.sum() == 0:
        return float("nan")
    return float(0.5 * np.abs(mine / mine.sum() - mat.sum(axis=0) / mat.sum()).sum())


def format_table(stats: PartitionStats) -> str:
    """Renders `PartitionStats` as a table plus a one-line summary.

    Example:
        >>> from graphdist.testing import tiny_graph, tiny_partition
        >>> print(format_table(partition_stats(tiny_graph(), tiny_partition())).splitlines()[0])
        part      inner       halo      edges      train  label TVD
    """
    lines = [f"{'part':>4} {'inner':>10} {'halo':>10} {'edges':>10} {'train':>10} {'label TVD':>10}"]
    for p in range(stats.num_parts):
        train = "-" if stats.train_nodes is None else f"{stats.train_nodes[p]:,}"
        tvd = stats.label_tvd[p] if stats.label_tvd is not None else None
        tvd_s = "-" if tvd is None else f"{tvd:.3f}"
        lines.append(
            f"{p:>4} {stats.inner_nodes[p]:>10,} {stats.halo_nodes[p]:>10,} {stats.edges[p]:>10,} {train:>10} {tvd_s:>10}"
        )
    summary = [
        f"edge cut {stats.edge_cut:.4f} ({stats.cut_edges:,} of {stats.num_edges:,} edges)",
        f"node balance {stats.node_balance:.3f}",
        f"edge balance {stats.edge_balance:.3f}",
    ]
    if stats.train_balance is not None:
        summary.append(f"train balance {stats.train_balance:.3f}")
    summary.append(f"replication {stats.replication_factor:.3f}")
    if stats.mean_label_tvd is not None and not math.isnan(stats.mean_label_tvd):
        summary.append(f"label TVD mean {stats.mean_label_tvd:.3f} max {stats.max_label_tvd:.3f}")
    lines.append(" | ".join(summary))
    return "\n".join(lines + _typed_lines(stats))


def _typed_lines(stats: PartitionStats) -> list[str]:
    """A typed graph's nodes per type (and their balance over the parts), edges and cut per relation."""
    if stats.node_types is None or stats.type_nodes is None or stats.relation_edges is None:
        return []
    lines = []
    for t, name in enumerate(stats.node_types):
        counts = [row[t] for row in stats.type_nodes]
        lines.append(f"type {name}: {sum(counts):,} nodes, per part {', '.join(f'{c:,}' for c in counts)}, "
                     f"balance {_balance(counts):.3f}")
    for r, name in enumerate(stats.relations or []):
        edges = sum(row[r] for row in stats.relation_edges)
        cut = sum(row[r] for row in stats.relation_cut or [])
        lines.append(f"relation {name}: {edges:,} edges, cut {cut / max(edges, 1):.4f}")
    return lines
