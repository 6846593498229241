"""Models of typed graphs: an input encoder to one width, R-GCN, and relation-wise GraphSAGE.

Every model here starts with :class:`TypedEncoder`: a ``Linear`` per featured type (on its own
columns of the padded feature table) and an embedding table per featureless type, so every node
enters layer 0 with ``hidden`` features and the loader, exact inference and the caches keep moving
one table of one width. Blocks from a typed graph carry each edge's relation and each source
node's type and row within it (``sampling.base.Block``).

- :class:`RGCN` (``--model rgcn``): R-GCN with basis decomposition on each bipartite block, per relation
  the mean of its neighbours, plus a root weight (:class:`RGCNLayer`: PyG's ``RGCNConv`` parameters,
  aggregated by one sparse product instead of per-edge messages).
- :class:`RelationSAGE` (``--model rsage``): PyG's ``HeteroConv`` of one ``SAGEConv`` per relation,
  summed over relations; :func:`hetero_inputs` hands a block to it as ``x_dict`` / ``edge_index_dict``.

Both are ``LayerwiseGNN``s: exact layer-at-a-time inference and ``--predict`` work as for the
homogeneous models (layer 0 encodes, so a full-graph block gives every node's type).

Example:
    >>> from graphdist.testing import typed_random_graph
    >>> from sampling import NeighborSampler
    >>> g = typed_random_graph(20)
    >>> model = RGCN(4, 8, 3, num_layers=2, schema=g.schema)
    >>> batch = NeighborSampler(g, [3, 3], seed=0).sample(torch.arange(4))
    >>> model(g.x[batch.input_nodes], batch.blocks).shape
    torch.Size([4, 3])
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor, nn

from graphdist.models.base import ReLUDropoutGNN, check_dims
from graphdist.models.ops import relation_means

__all__ = ["RGCN", "RGCNLayer", "RelationSAGE", "TypedEncoder", "hetero_inputs", "require_typed"]


def require_typed(block: Any) -> None:
    """Raises ``ValueError`` unless ``block`` carries relations and node types (sampled from a typed graph)."""
    if getattr(block, "edge_type", None) is None or getattr(block, "node_type", None) is None:
        raise ValueError("Expected blocks of a typed graph (edge_type and node_type set): these models need node types "
                         "and relations; train --model sage/gcn/gat on an untyped graph")


class TypedEncoder(nn.Module):
    """Maps every node type to ``out_dim`` features: ``Linear(F_t, out_dim)`` per featured type, an
    ``nn.Embedding(N_t, out_dim, sparse=True)`` per featureless one.

    Args:
        schema: the graph's ``Schema`` (types, widths, node counts).
        out_dim: the common width.

    Example:
        >>> from graphdist.data.hetero import Relation, Schema
        >>> s = Schema(("p", "w"), (0, 2, 5), (Relation("w", "in", "p"),), (4, 0))
        >>> enc = TypedEncoder(s, 8)
        >>> enc(torch.ones(3, 4), torch.tensor([0, 1, 1]), torch.tensor([0, 0, 2])).shape
        torch.Size([3, 8])
    """

    def __init__(self, schema: Any, out_dim: int) -> None:
        super().__init__()
        self.widths = tuple(int(w) for w in schema.widths)
        self.out_dim = int(out_dim)
        # Keyed by position: type names may not be valid module names.
        self.encoders = nn.ModuleList(
            nn.Linear(w, out_dim) if w else nn.Embedding(schema.num_nodes(t), out_dim, sparse=True)
            for t, w in zip(schema.node_types, self.widths))
        for enc in self.encoders:
            if isinstance(enc, nn.Embedding):
                nn.init.normal_(enc.weight, std=1.0 / out_dim ** 0.5)
                # Sparse gradients: only the looked-up rows are exchanged (sync/tables.py) and moved by the
                # trainers' Adam (trainers/row_adam.py); a dense one would be the whole table every step.
                enc.weight.row_wise = True

    def forward(self, x: Optional[Tensor], node_type: Tensor, type_index: Tensor) -> Tensor:
        """``[len(node_type), out_dim]``: each row encoded by its type's module.

        Every type's module runs, on no rows when the type is absent, so every parameter gets a
        gradient each step (zeros where unused) and the gradient sync sees the same tensors on all ranks.
        """
        out = None
        for t, (enc, width) in enumerate(zip(self.encoders, self.widths)):
            rows = (node_type == t).nonzero().view(-1)
            h = enc(x.index_select(0, rows)[:, :width]) if width else enc(type_index.index_select(0, rows))
            if out is None:
                out = h.new_zeros((node_type.numel(), self.out_dim))
            out = out.index_copy(0, rows, h)
        return out  # type: ignore[return-value]


class _EncodedGNN(ReLUDropoutGNN):
    """Layer 0 encodes the block's sources (:class:`TypedEncoder`), then every layer runs ``_conv``."""

    def __init__(self, layers: list[nn.Module], dropout: float, schema: Any, hidden: int) -> None:
        super().__init__(layers, dropout)
        self.encoder = TypedEncoder(schema, hidden)
        self.schema = schema

    def layer_forward(self, i: int, x: Tensor, block: Any) -> Tensor:
        require_typed(block)
        if i == 0:
            x = self.encoder(x, block.node_type, block.type_index)
        return self._activate(i, self._conv(i, x, block))

    def _conv(self, i: int, x: Tensor, block: Any) -> Tensor:
        raise NotImplementedError


class RGCN(_EncodedGNN):
    """R-GCN (Schlichtkrull et al.) on blocks: ``h_v = W_0 x_v + sum_r mean_{u in N_r(v)} W_r x_u``, ``W_r`` a
    combination of ``num_bases`` shared bases.

    Args:
        in_dim: the feature table's width (each type's encoder reads its own columns; kept for the
            reference models' signature).
        hidden: the encoder's and every hidden layer's width.
        out_dim: classes.
        num_layers: R-GCN layers, one block each.
        dropout: after every hidden layer.
        schema: the graph's ``Schema``.
        num_bases: bases per layer (0: half the relations rounded up, at least 2 and at most 8: one basis
            shared by every relation cost typed cora 8 points of accuracy against two).

    Example:
        >>> from graphdist.testing import typed_random_graph
        >>> RGCN(4, 8, 3, schema=typed_random_graph(10).schema).layers[0].num_bases  # 5 relations
        3
    """

    def __init__(self, in_dim: int, hidden: int, out_dim: int, num_layers: int = 2, dropout: float = 0.5,
                 schema: Any = None, num_bases: int = 0) -> None:
        check_dims(max(in_dim, 1), hidden, out_dim, num_layers, dropout)
        if schema is None:
            raise ValueError("schema: R-GCN needs a typed graph's node types and relations")
        r = schema.num_relations
        bases = int(num_bases) if num_bases else min(8, max(2, -(-r // 2)))
        dims = [hidden] * num_layers + [out_dim]
        super().__init__([RGCNLayer(a, b, r, bases) for a, b in zip(dims[:-1], dims[1:])], dropout, schema, hidden)

    def _conv(self, i: int, x: Tensor, block: Any) -> Tensor:
        return self.layers[i](x, block)


class RGCNLayer(nn.Module):
    """One R-GCN layer with basis decomposition, aggregating before it transforms.

    ``h_v = b + W_0 x_v + sum_r mean_{u in N_r(v)} x_u W_r`` with ``W_r = sum_b comp[r, b] weight[b]``: every
    relation's mean and the node's own row come from one sparse product (``ops.relation_means``), then one
    GEMM with ``[W_1; ...; W_R; W_0]``. PyG's ``RGCNConv`` gathers every edge's source row per relation (an
    ``E x F`` tensor forward and another backward); on synthetic-hetero-3m's blocks those dominated a step's
    memory. The parameters are ``RGCNConv``'s (names, shapes, initialisation), so its checkpoints load and
    :meth:`to_pyg` gives the oracle. The means take ``num_dst x (R + 1) x in_dim`` floats whatever the edges:
    less than PyG's per-edge rows while a destination has more than ``R + 1`` sampled edges, more on a graph
    of hundreds of sparse relations (a knowledge graph), where ``RGCNConv`` is the leaner layer.

    Args:
        in_dim, out_dim: widths.
        num_relations: R.
        num_bases: bases shared by the relations.

    Example:
        >>> from graphdist.testing import typed_random_graph
        >>> from sampling import NeighborSampler
        >>> g = typed_random_graph(20)
        >>> block = NeighborSampler(g, [3], seed=0).sample(torch.arange(4)).blocks[0]
        >>> RGCNLayer(4, 8, g.schema.num_relations, 2)(g.x[: block.num_src], block).shape
        torch.Size([4, 8])
    """

    def __init__(self, in_dim: int, out_dim: int, num_relations: int, num_bases: int) -> None:
        super().__init__()
        self.in_channels, self.out_channels = int(in_dim), int(out_dim)
        self.num_relations, self.num_bases = int(num_relations), int(num_bases)
        self.weight = nn.Parameter(torch.empty(self.num_bases, self.in_channels, self.out_channels))
        self.comp = nn.Parameter(torch.empty(self.num_relations, self.num_bases))
        self.root = nn.Parameter(torch.empty(self.in_channels, self.out_channels))
        self.bias = nn.Parameter(torch.empty(self.out_channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # RGCNConv's: Glorot-uniform over the last two dimensions, in the same order (same draws for a seed).
        for p in (self.weight, self.comp, self.root):
            bound = (6.0 / (p.shape[-2] + p.shape[-1])) ** 0.5
            nn.init.uniform_(p, -bound, bound)
        nn.init.zeros_(self.bias)

    def stacked_weight(self) -> Tensor:
        """``[(R + 1) * in_dim, out_dim]``: each relation's ``W_r``, then the root weight."""
        per_relation = (self.comp @ self.weight.view(self.num_bases, -1)).view(-1, self.out_channels)
        return torch.cat([per_relation, self.root])

    def forward(self, x: Tensor, block: Any) -> Tensor:
        """Pre-activation output for the block's ``num_dst`` destinations (sources ``x``, ``num_src`` rows)."""
        require_typed(block)
        return torch.addmm(self.bias, relation_means(x, block, self.num_relations), self.stacked_weight())

    def to_pyg(self) -> nn.Module:
        """PyG's ``RGCNConv`` holding this layer's own parameters (gradients reach them): the oracle."""
        from torch_geometric.nn import RGCNConv

        with torch.random.fork_rng(devices=[]):  # its own initialisation, replaced below, must not move the seed stream
            conv = RGCNConv(self.in_channels, self.out_channels, self.num_relations, num_bases=self.num_bases)
        for name in ("weight", "comp", "root", "bias"):
            setattr(conv, name, getattr(self, name))
        return conv


def hetero_inputs(x: Tensor, block: Any, schema: Any) -> tuple[dict[str, Tensor], dict[tuple[str, str, str], Tensor],
                                                                 dict[str, Tensor]]:
    """A typed block as PyG's heterogeneous inputs: ``x_dict``, ``edge_index_dict`` and where each type's
    destinations are.

    ``x_dict[t]`` holds the block's sources of type ``t`` in block order, so its first rows are the type's
    destinations (a block's destinations are its first sources); edges are renumbered within their types.
    ``dst_rows[t]``: the block rows of type ``t``'s destinations, in ``x_dict[t]`` order.

    Example:
        >>> from graphdist.testing import typed_random_graph
        >>> from sampling import NeighborSampler
        >>> g = typed_random_graph(20)
        >>> block = NeighborSampler(g, [-1], seed=0).sample(torch.tensor([0, 1])).blocks[0]
        >>> x_dict, ei_dict, dst_rows = hetero_inputs(g.x[:block.num_src], block, g.schema)
        >>> dst_rows["paper"].tolist(), sorted(x_dict) == sorted(g.schema.node_types)
        ([0, 1], True)
    """
    require_typed(block)
    node_type = block.node_type
    within = torch.empty_like(node_type)
    x_dict, dst_rows = {}, {}
    for t, name in enumerate(schema.node_types):
        rows = (node_type == t).nonzero().view(-1)
        within[rows] = torch.arange(rows.numel(), device=rows.device)
        x_dict[name] = x.index_select(0, rows)
        dst_rows[name] = rows[rows < block.num_dst]
    edge_index_dict = {}
    for r, rel in enumerate(schema.relations):
        pick = (block.edge_type == r).nonzero().view(-1)
        edge_index_dict[(rel.src, rel.name, rel.dst)] = torch.stack(
            [within[block.src.index_select(0, pick)], within[block.dst.index_select(0, pick)]])
    return x_dict, edge_index_dict, dst_rows


class RelationSAGE(_EncodedGNN):
    """Relation-wise GraphSAGE: per relation a ``SAGEConv`` (mean of that relation's neighbours, root weight),
    summed over the relations that reach a type (PyG ``HeteroConv(aggr="sum")``).

    Args: as :class:`RGCN`, without bases.

    Example:
        >>> from graphdist.testing import typed_random_graph
        >>> len(RelationSAGE(4, 8, 3, schema=typed_random_graph(10).schema).layers[0].convs)
        5
    """

    def __init__(self, in_dim: int, hidden: int, out_dim: int, num_layers: int = 2, dropout: float = 0.5,
                 schema: Any = None) -> None:
        from torch_geometric.nn import HeteroConv, SAGEConv

        check_dims(max(in_dim, 1), hidden, out_dim, num_layers, dropout)
        if schema is None:
            raise ValueError("schema: relation-wise SAGE needs a typed graph's node types and relations")
        dims = [hidden] * num_layers + [out_dim]
        layers = [HeteroConv({(r.src, r.name, r.dst): SAGEConv(a, b) for r in schema.relations}, aggr="sum")
                  for a, b in zip(dims[:-1], dims[1:])]
        super().__init__(layers, dropout, schema, hidden)
        self.out_dims = dims[1:]

    def _conv(self, i: int, x: Tensor, block: Any) -> Tensor:
        x_dict, edge_index_dict, dst_rows = hetero_inputs(x, block, self.schema)
        out_dict = self.layers[i](x_dict, edge_index_dict)
        out = x.new_zeros((block.num_dst, self.out_dims[i]))
        for name, rows in dst_rows.items():
            if name in out_dict:  # a type no relation reaches gets no messages: zeros
                out = out.index_copy(0, rows, out_dict[name][: rows.numel()])
        return out
