"""The `Graph` container: a validated CSR graph with optional node data.

Rows are destination nodes: row ``v`` lists ``v``'s in-neighbours, the nodes
whose messages ``v`` aggregates. For an undirected graph both directions are
stored. Edge counts are always directed counts.

Every array is a ``torch.Tensor``. ``x`` may share memory with a numpy memory
map (``torch.from_numpy(np.load(path, mmap_mode="c"))``); its NaN/inf scan is
then done once, in chunks, by whoever maps it (``validate_features=False``
here), not on every construction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import torch

from graphdist.data.arrays import MASK_NAMES, _cow_view, as_tensor, counts_to_indptr  # noqa: F401 - re-exported
from graphdist.data.schema import check_typed

if TYPE_CHECKING:  # torch_geometric is imported lazily: spawned workers start fast.
    from torch_geometric.data import Data, HeteroData

    from graphdist.data.schema import Schema

# Rows scanned per chunk when checking features for NaN/inf: bounded memory on
# memory-mapped matrices (64 Ki rows x 100 floats = 25 MiB).
_SCAN_ROWS = 1 << 16


def check_finite_features(x: torch.Tensor, name: str = "x") -> None:
    """Raises ``ValueError`` naming the first row with NaN or inf; scans in chunks.

    Example:
        >>> check_finite_features(torch.ones(3, 2))
    """
    if not torch.is_floating_point(x):
        return
    for start in range(0, x.shape[0], _SCAN_ROWS):
        chunk = x[start : start + _SCAN_ROWS]
        bad = ~torch.isfinite(chunk)
        if bool(bad.any()):
            row = start + int(bad.any(dim=-1).nonzero()[0, 0]) if chunk.dim() > 1 else start + int(bad.nonzero()[0, 0])
            raise ValueError(f"{name}: features must be finite (got NaN or inf in row {row})")


def check_multilabel(y: torch.Tensor, name: str = "y") -> None:
    """Raises ``ValueError`` unless ``y`` is a ``[N, C]`` matrix of 0/1 in an integer or bool dtype.

    Example:
        >>> check_multilabel(torch.tensor([[0, 1], [1, 1]], dtype=torch.uint8))
    """
    if y.dim() != 2:
        raise ValueError(f"{name}: expected a [N, C] 0/1 matrix for multi-label classification (got shape "
                         f"{tuple(y.shape)})")
    if y.dtype != torch.bool and (y.dtype.is_floating_point or y.dtype.is_complex):
        raise ValueError(f"{name}: expected a multi-label matrix of integers or bools (got dtype {y.dtype})")
    if y.dtype != torch.bool and y.numel() and bool(((y != 0) & (y != 1)).any()):
        raise ValueError(f"{name}: a multi-label matrix holds 0 and 1 only (got {int(y[(y != 0) & (y != 1)][0])})")


def as_multilabel(y: Any, name: str = "y") -> torch.Tensor:
    """A ``[N, C]`` 0/1 matrix (any numeric dtype, floats included) as uint8, checked.

    Example:
        >>> as_multilabel(torch.tensor([[1.0, 0.0]])).tolist()
        [[1, 0]]
    """
    y = as_tensor(y, name)
    if y.dtype.is_floating_point:
        if y.numel() and bool(((y != 0) & (y != 1)).any()):
            raise ValueError(f"{name}: a multi-label matrix holds 0 and 1 only (got {float(y[(y != 0) & (y != 1)][0])})")
        y = y.to(torch.uint8)
    check_multilabel(y, name)
    return y.to(torch.uint8)


def loop_free_degrees(indptr: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Row lengths of a CSR whose row ``v`` is node ``v``, not counting entries ``v`` (self loops).

    Rows may be fewer than the ids ``indices`` holds (a partition's inner rows over local ids).

    Example:
        >>> loop_free_degrees(torch.tensor([0, 2, 3]), torch.tensor([0, 1, 0])).tolist()
        [1, 1]
    """
    counts = indptr[1:] - indptr[:-1]
    edges = indices[: int(indptr[-1])].to(torch.int64)
    rows = torch.repeat_interleave(torch.arange(counts.numel(), dtype=torch.int64), counts, output_size=edges.numel())
    return counts - torch.bincount(rows[edges == rows], minlength=counts.numel())


@dataclass(eq=False)
class Graph:
    """A directed graph in CSR form (rows = destinations) with optional node data.

    Args:
        indptr: int64 ``[num_nodes + 1]``; row ``v``'s in-neighbours are
            ``indices[indptr[v]:indptr[v+1]]``.
        indices: int64 or int32 ``[num_edges]``, source node ids.
        x: float32 ``[num_nodes, F]`` features, optional.
        y: int64 ``[num_nodes]`` labels (``-1`` = unlabelled), or for multi-label
            classification a ``[num_nodes, C]`` 0/1 matrix (uint8, bool or any integer dtype), optional.
        train_mask, val_mask, test_mask: bool ``[num_nodes]``, optional.
        name: a label for logs and metadata.
        validate_features: scan ``x`` for NaN/inf (loaders of memory maps scan once themselves).
        edge_type: a typed graph's relation of every edge (aligned with ``indices``), optional.
        schema: a typed graph's node types, relations and target (``graphdist.data.hetero``), optional;
            given together with ``edge_type``.

    Raises:
        ValueError: naming the field and the offending value on any inconsistency.

    Example:
        >>> g = Graph.from_edge_index(torch.tensor([[0, 1], [1, 2]]), num_nodes=3)
        >>> g.num_nodes, g.num_edges, g.in_neighbors(1).tolist()
        (3, 2, [0])
    """

    indptr: torch.Tensor
    indices: torch.Tensor
    x: Optional[torch.Tensor] = None
    y: Optional[torch.Tensor] = None
    train_mask: Optional[torch.Tensor] = None
    val_mask: Optional[torch.Tensor] = None
    test_mask: Optional[torch.Tensor] = None
    name: str = "graph"
    validate_features: bool = True
    edge_type: Optional[torch.Tensor] = None
    schema: Optional["Schema"] = None

    def __post_init__(self) -> None:
        self.indptr = as_tensor(self.indptr, "indptr")
        self.indices = as_tensor(self.indices, "indices")
        for field in ("x", "y", *MASK_NAMES, "edge_type"):
            value = getattr(self, field)
            if value is not None:
                setattr(self, field, as_tensor(value, field))
        self._validate()
        if self.edge_type is not None or self.schema is not None:
            check_typed(self)

    @property
    def typed(self) -> bool:
        """Whether the graph has node types and relations (``schema`` and ``edge_type``)."""
        return self.schema is not None

    # ------------------------------------------------------------------ checks
    def _validate(self) -> None:
        indptr, indices = self.indptr, self.indices
        if indptr.dim() != 1 or indptr.numel() < 1:
            raise ValueError(f"indptr: expected a 1-D array of num_nodes + 1 entries (got shape {tuple(indptr.shape)})")
        if indptr.dtype != torch.int64:
            raise ValueError(f"indptr: expected dtype int64 (got {indptr.dtype})")
        if indices.dim() != 1:
            raise ValueError(f"indices: expected a 1-D array (got shape {tuple(indices.shape)})")
        if indices.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"indices: expected dtype int64 or int32 (got {indices.dtype})")
        if int(indptr[0]) != 0:
            raise ValueError(f"indptr: must start at 0 (got {int(indptr[0])})")
        if int(indptr[-1]) != indices.numel():
            raise ValueError(
                f"indptr: last entry must equal len(indices) = {indices.numel()} (got {int(indptr[-1])})"
            )
        counts = indptr[1:] - indptr[:-1]
        if counts.numel() and bool((counts < 0).any()):
            row = int((counts < 0).nonzero()[0, 0])
            raise ValueError(f"indptr: must be non-decreasing; row {row} has a negative count ({int(counts[row])})")
        n = self.num_nodes
        if indices.numel():
            lo, hi = int(indices.min()), int(indices.max())
            if lo < 0 or hi >= n:
                bad = lo if lo < 0 else hi
                raise ValueError(f"indices: node ids must lie in [0, {n}) (got {bad})")
        if self.x is not None:
            if self.x.dim() != 2 or self.x.shape[0] != n:
                raise ValueError(f"x: expected shape [{n}, F] (got {tuple(self.x.shape)})")
            if self.x.dtype != torch.float32:
                raise ValueError(f"x: expected dtype float32 (got {self.x.dtype})")
            if self.validate_features:
                check_finite_features(self.x)
        if self.y is not None:
            if self.y.dim() == 2 and self.y.shape[0] == n and self.y.shape[1] >= 2:
                check_multilabel(self.y)
            elif self.y.dim() != 1 or self.y.shape[0] != n:
                raise ValueError(f"y: expected shape [{n}] (classes) or [{n}, C >= 2] (multi-label 0/1) "
                                 f"(got {tuple(self.y.shape)})")
            elif self.y.dtype not in (torch.int64, torch.int32):
                raise ValueError(f"y: expected an integer dtype (got {self.y.dtype})")
        for field in MASK_NAMES:
            mask = getattr(self, field)
            if mask is None:
                continue
            if mask.dtype != torch.bool:
                raise ValueError(f"{field}: expected dtype bool (got {mask.dtype})")
            if mask.dim() != 1 or mask.shape[0] != n:
                raise ValueError(f"{field}: expected shape [{n}] (got {tuple(mask.shape)})")

    # ------------------------------------------------------------ constructors
    @classmethod
    def from_edge_index(
        cls,
        edge_index: Any,
        num_nodes: Optional[int] = None,
        **node_data: Any,
    ) -> "Graph":
        """Builds a graph from a ``[2, E]`` array of (source, destination) pairs.

        Edges keep their multiplicity; within a row, sources are sorted.

        Args:
            edge_index: int ``[2, E]``, row 0 sources, row 1 destinations.
            num_nodes: node count; default ``max id + 1`` (or the rows of ``x``).
            **node_data: ``x``, ``y``, masks, ``name``, ``validate_features``.

        Example:
            >>> Graph.from_edge_index([[0, 0], [1, 2]]).degrees().tolist()
            [0, 1, 1]
        """
        ei = as_tensor(edge_index, "edge_index")
        if ei.dim() != 2 or ei.shape[0] != 2:
            raise ValueError(f"edge_index: expected shape [2, E] (got {tuple(ei.shape)})")
        if ei.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8):
            # Casting float ids would silently truncate 1.7 to 1: refuse instead.
            raise ValueError(f"edge_index: expected an integer dtype (got {ei.dtype})")
        ei = ei.to(torch.int64)
        if num_nodes is None:
            x = node_data.get("x")
            if x is not None:
                num_nodes = int(x.shape[0])
            else:
                num_nodes = int(ei.max()) + 1 if ei.numel() else 0
        if num_nodes < 0:
            raise ValueError(f"num_nodes: must be >= 0 (got {num_nodes})")
        if ei.numel():
            lo, hi = int(ei.min()), int(ei.max())
            if lo < 0 or hi >= num_nodes:
                raise ValueError(f"edge_index: node ids must lie in [0, {num_nodes}) (got {lo if lo < 0 else hi})")
        indptr, indices = edges_to_csr(ei[0], ei[1], num_nodes)
        return cls(indptr=indptr, indices=indices, **node_data)

    @classmethod
    def from_csr(cls, indptr: Any, indices: Any, **node_data: Any) -> "Graph":
        """Wraps existing CSR arrays (rows = destinations) without copying them.

        Example:
            >>> Graph.from_csr([0, 1, 1], [1]).edge_index().tolist()
            [[1], [0]]
        """
        return cls(indptr=indptr, indices=indices, **node_data)

    @classmethod
    def from_pyg(cls, data: "Data | HeteroData", name: str = "pyg") -> "Graph":
        """Converts a ``torch_geometric.data.Data`` (``edge_index`` is source -> target), or a
        ``HeteroData`` into a typed graph (:meth:`from_hetero`).

        Example:
            >>> from torch_geometric.data import Data
            >>> Graph.from_pyg(Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2)).num_edges
            1
        """
        if type(data).__name__ == "HeteroData":
            return cls.from_hetero(data, name=name)
        node_data: dict[str, Any] = {"name": name}
        for field in ("x", "y", *MASK_NAMES):
            value = getattr(data, field, None)
            if value is not None:
                node_data[field] = value
        if "x" in node_data and node_data["x"].dtype != torch.float32:
            node_data["x"] = node_data["x"].float()
        if "y" in node_data and node_data["y"].dim() == 2:
            y = node_data["y"]
            # [N, 1] is a class column; [N, C] of 0/1 (PyG keeps PPI's as float) is multi-label.
            node_data["y"] = y.view(-1) if y.shape[1] == 1 else as_multilabel(y, "y")
        return cls.from_edge_index(data.edge_index, num_nodes=data.num_nodes, **node_data)

    @classmethod
    def from_hetero(cls, data: "HeteroData", name: str = "hetero", target: Optional[str] = None) -> "Graph":
        """A typed graph from a PyG ``HeteroData``: every node type, relation, ``x``; ``y`` and masks of
        the one type that has ``y`` (or ``target``). See ``graphdist.data.hetero``.

        Example:
            >>> from torch_geometric.data import HeteroData
            >>> d = HeteroData()
            >>> d["paper"].x = torch.ones(2, 3); d["paper"].y = torch.tensor([0, 1]); d["author"].num_nodes = 4
            >>> d["author", "writes", "paper"].edge_index = torch.tensor([[0, 3], [1, 1]])
            >>> g = Graph.from_hetero(d)
            >>> g.schema.describe()
            '2 node types (paper 2, author 4*), 1 relations; * featureless'
        """
        from graphdist.data.schema import hetero_fields

        return cls(**hetero_fields(data, name=name, target=target))

    @classmethod
    def from_types(cls, num_nodes: Any, edges: Any, x: Any = None, y: Any = None, masks: Any = None,
                   target: Optional[str] = None, name: str = "typed") -> "Graph":
        """A typed graph from per-type node counts, per-relation edges (ids within their types) and per-type
        features; labels and masks of the target type (``graphdist.data.schema.typed_fields``).

        Example:
            >>> g = Graph.from_types({"paper": 2, "author": 1}, {("author", "writes", "paper"): [[0, 0], [0, 1]]})
            >>> g.num_nodes, g.edge_type.tolist()
            (3, [0, 0])
        """
        from graphdist.data.schema import typed_fields

        return cls(**typed_fields(num_nodes, edges, x=x, y=y, masks=masks, target=target, name=name))

    def to_pyg(self) -> "Data":
        """Returns a ``torch_geometric.data.Data`` with ``edge_index`` source -> target."""
        from torch_geometric.data import Data

        data = Data(edge_index=self.edge_index(), num_nodes=self.num_nodes)
        for field in ("x", "y", *MASK_NAMES):
            value = getattr(self, field)
            if value is not None:
                data[field] = value
        return data

    # --------------------------------------------------------------- queries
    @property
    def num_nodes(self) -> int:
        return int(self.indptr.numel()) - 1

    @property
    def num_edges(self) -> int:
        """Directed edge count (an undirected edge counts twice)."""
        return int(self.indices.numel())

    @property
    def num_features(self) -> int:
        return 0 if self.x is None else int(self.x.shape[1])

    @property
    def num_classes(self) -> int:
        """Classes (labels, for multi-label ``y``); 0 without labels."""
        if self.y is None or self.y.numel() == 0:
            return 0
        return int(self.y.shape[1]) if self.multilabel else int(self.y.max()) + 1

    @property
    def multilabel(self) -> bool:
        """Whether ``y`` is a ``[N, C]`` 0/1 matrix (each node may carry several labels)."""
        return self.y is not None and self.y.dim() == 2

    def degrees(self, self_loops: bool = True) -> torch.Tensor:
        """In-degree of every node (the row lengths), int64; ``self_loops=False`` leaves out self-loop edges.

        Example:
            >>> g = Graph(indptr=torch.tensor([0, 2, 3]), indices=torch.tensor([0, 1, 0]))
            >>> g.degrees().tolist(), g.degrees(self_loops=False).tolist()
            ([2, 1], [1, 1])
        """
        if self_loops:
            return self.indptr[1:] - self.indptr[:-1]
        return loop_free_degrees(self.indptr, self.indices)

    def in_neighbors(self, node: int) -> torch.Tensor:
        return self.indices[int(self.indptr[node]) : int(self.indptr[node + 1])]

    def dst_of_edges(self) -> torch.Tensor:
        """The destination (row) of every edge in CSR order."""
        return torch.repeat_interleave(torch.arange(self.num_nodes, dtype=torch.int64), self.degrees())

    def edge_index(self) -> torch.Tensor:
        """``[2, E]`` int64, row 0 sources, row 1 destinations, in CSR order."""
        return torch.stack([self.indices.to(torch.int64), self.dst_of_edges()])

    def node_data(self) -> dict[str, Any]:
        """The optional per-node fields that are set, by name."""
        return {f: getattr(self, f) for f in ("x", "y", *MASK_NAMES) if getattr(self, f) is not None}

    # ------------------------------------------------------------ transforms
    def subgraph(self, nodes: Any) -> tuple["Graph", torch.Tensor]:
        """The subgraph induced by ``nodes`` and the local -> global id map.

        Local id ``i`` is ``nodes[i]`` (order kept); an edge survives when both
        its ends are in ``nodes``. Node data rows are taken along.

        Returns:
            ``(subgraph, node_ids)`` where ``node_ids[local] = global``.

        Raises:
            ValueError: on out-of-range or repeated node ids.

        Example:
            >>> g = Graph.from_edge_index([[0, 1, 2], [1, 2, 0]])
            >>> sub, ids = g.subgraph([2, 0])
            >>> sub.edge_index().tolist(), ids.tolist()
            ([[0], [1]], [2, 0])
        """
        nodes = as_tensor(nodes, "nodes").to(torch.int64).view(-1)
        n = self.num_nodes
        if nodes.numel() and (int(nodes.min()) < 0 or int(nodes.max()) >= n):
            raise ValueError(f"nodes: ids must lie in [0, {n}) (got {int(nodes.min())}..{int(nodes.max())})")
        local = torch.full((n,), -1, dtype=torch.int64)
        local[nodes] = torch.arange(nodes.numel(), dtype=torch.int64)
        if int((local >= 0).sum()) != nodes.numel():
            raise ValueError("nodes: ids must be distinct (got repeated ids)")
        starts, ends = self.indptr[nodes], self.indptr[nodes + 1]
        counts = ends - starts
        positions = ranges(starts, counts)
        src_local = local[self.indices[positions].to(torch.int64)]
        dst_local = torch.repeat_interleave(torch.arange(nodes.numel(), dtype=torch.int64), counts)
        keep = src_local >= 0
        indptr, indices = edges_to_csr(src_local[keep], dst_local[keep], nodes.numel())
        data = {f: v[nodes] for f, v in self.node_data().items()}
        sub = Graph(indptr=indptr, indices=indices.to(self.indices.dtype), name=f"{self.name}[sub]", **data)
        return sub, nodes

    def to_undirected(self) -> "Graph":
        """Adds every reverse edge, dropping duplicates (self loops kept once).

        Example:
            >>> Graph.from_edge_index([[0], [1]]).to_undirected().num_edges
            2
        """
        src = self.indices.to(torch.int64)
        dst = self.dst_of_edges()
        n = self.num_nodes
        keys = torch.cat([dst * n + src, src * n + dst])
        keys = torch.unique(keys)  # sorted: rows (dst) then sources
        dst_u, src_u = keys // max(n, 1), keys % max(n, 1)
        indptr = counts_to_indptr(torch.bincount(dst_u, minlength=n))
        return Graph(
            indptr=indptr, indices=src_u.to(self.indices.dtype), name=self.name, validate_features=False,
            **self.node_data(),
        )

    def __repr__(self) -> str:
        parts = [f"name={self.name!r}", f"num_nodes={self.num_nodes:,}", f"num_edges={self.num_edges:,}"]
        if self.schema is not None:
            parts.append(f"node_types={self.schema.num_types}, relations={self.schema.num_relations}")
        if self.x is not None:
            parts.append(f"num_features={self.num_features}")
        if self.y is not None:
            parts.append(f"num_classes={self.num_classes}")
        for field in MASK_NAMES:
            mask = getattr(self, field)
            if mask is not None:
                parts.append(f"{field.split('_')[0]}={int(mask.sum()):,}")
        return f"Graph({', '.join(parts)})"


# ---------------------------------------------------------------- helpers
def edges_to_csr(src: torch.Tensor, dst: torch.Tensor, num_nodes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR (rows = ``dst``) of the given edges, sources sorted within a row.

    A single sort on the combined key ``dst * N + src`` orders rows and sources
    at once; it is faster than a stable two-pass sort on large edge sets.
    """
    src = src.to(torch.int64)
    dst = dst.to(torch.int64)
    if src.numel() == 0:
        return torch.zeros(num_nodes + 1, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)
    n = max(num_nodes, 1)
    keys, _ = torch.sort(dst * n + src)
    indices = keys % n
    indptr = counts_to_indptr(torch.bincount(keys // n, minlength=num_nodes))
    return indptr, indices


def ranges(starts: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Concatenation of ``arange(s, s + c)`` for every (s, c), vectorised."""
    total = int(counts.sum())
    if total == 0:
        return torch.zeros(0, dtype=torch.int64)
    offsets = torch.repeat_interleave(starts - counts_to_indptr(counts)[:-1], counts)
    return torch.arange(total, dtype=torch.int64) + offsets

