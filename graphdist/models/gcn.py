"""GCN on message-flow blocks, normalised by GLOBAL degrees when the trainer provides them.

Kipf & Welling's layer is ``h_v = sum_{u in N(v) + v} x_u W / sqrt((d_u+1)(d_v+1)) + b``.
On a sampled block the degrees that matter are the full graph's, which the block does
not know; so the trainer calls :func:`gcn_norm_block` with each source node's global
in-degree. That returns a block with one self-loop edge per destination row (first in
its CSR row) and ``edge_weight = 1/sqrt((d_u+1)(d_v+1))``; the layer then sums
``edge_weight * x_u`` over the block's edges and nothing else. With full neighbourhoods
this is exactly PyG's ``GCNConv`` on the whole graph.

When ``block.edge_weight`` is None the layer falls back to the block's own in-degree
``k_v`` (the sampled neighbours): ``h_v = (x_v + sum_{u in block N(v)} x_u) W / (k_v + 1)``,
a right (random-walk) normalisation that needs no global information. It differs from the
symmetric normalisation even with full neighbourhoods (``1/(d_v+1)`` for every neighbour
instead of ``1/sqrt((d_u+1)(d_v+1))``), so a model trained one way should be evaluated
the same way.

Example:
    >>> from graphdist.testing import tiny_graph
    >>> from sampling import NeighborSampler
    >>> g = tiny_graph(feature_dim=16)
    >>> batch = NeighborSampler(g, [2, 2], seed=0).sample(torch.tensor([0, 1]))
    >>> global_in_degree = g.degrees()[batch.input_nodes]  # block-local id i is input_nodes[i]
    >>> blocks = [gcn_norm_block(b, global_in_degree[: b.num_src]) for b in batch.blocks]
    >>> model = GCN(16, 32, 4, num_layers=2, dropout=0.5)
    >>> model(g.x[batch.input_nodes], blocks).shape
    torch.Size([2, 4])
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any

import torch
from torch import nn

from graphdist._numba import compiled_enabled
from graphdist.models.base import ReLUDropoutGNN, check_dims, rename_legacy_keys
from graphdist.models.dense import Linear
from graphdist.models.ops import aggregate, block_indptr, in_degree


def gcn_norm_block(block: Any, src_degree: torch.Tensor) -> Any:
    """A copy of ``block`` with self loops and symmetric GCN edge weights from global degrees.

    Each destination row gets one self loop of weight ``1/(d_v+1)``; a self-loop edge of the
    graph sampled into the block is dropped (the row's own loop stands for it, as PyG's
    ``add_remaining_self_loops``). A row whose ``k`` sampled neighbours are ``k`` of its ``d``
    has their weights scaled by ``d/k``: the sampled aggregation is then unbiased, and with full
    neighbourhoods (``k = d``) this is exactly ``GCNConv``.

    Args:
        block: a block (duck-typed; a dataclass is copied with ``dataclasses.replace``).
        src_degree: global in-degree, self loops not counted, of each of the block's
            ``num_src`` source nodes (destination nodes are the first ``num_dst`` sources, so
            their degrees are ``src_degree[:num_dst]``; ``Partition.in_degrees()``).

    Returns:
        A block of the same type with ``num_dst`` more edges (self loop first in each row),
        ``indptr``/``src``/``dst`` updated and ``edge_weight`` set.

    Raises:
        ValueError: if ``src_degree`` does not have ``num_src`` entries.

    Example:
        >>> from sampling import Block
        >>> block = Block(src=torch.tensor([1, 2]), dst=torch.tensor([0, 0]), num_src=3, num_dst=1,
        ...               indptr=torch.tensor([0, 2]))
        >>> deg = torch.tensor([3, 1, 3])  # global in-degrees: node 0 has a neighbour the sample left out
        >>> normed = gcn_norm_block(block, deg)
        >>> normed.src.tolist(), normed.indptr.tolist()  # the self loop comes first in its row
        ([0, 1, 2], [0, 3])
        >>> normed.edge_weight  # self loop 1/(d_v+1); neighbours 1/sqrt((d_u+1)(d_v+1)) x d_v/k_v = 3/2
        tensor([0.2500, 0.5303, 0.3750])
    """
    num_src, num_dst = int(block.num_src), int(block.num_dst)
    if src_degree.numel() != num_src:
        raise ValueError(f"Expected src_degree with num_src={num_src} entries (got {src_degree.numel()})")
    indptr = block_indptr(block)
    device = indptr.device
    if device.type == "cpu" and compiled_enabled(int(block.src.numel()), COMPILED_MIN_EDGES) and int(indptr[0]) == 0:
        src, dst, new_indptr, weight = _norm_loop()(indptr.numpy(), block.src.numpy(),
                                                     src_degree.to(torch.float32).numpy(), num_dst)
        return _replace(block, src=torch.from_numpy(src), dst=torch.from_numpy(dst),
                        indptr=torch.from_numpy(new_indptr), edge_weight=torch.from_numpy(weight))
    edge_src = block.src
    # Each edge's row: the block's own dst when it has one (sampled blocks do), else from indptr.
    edge_row = getattr(block, "dst", None)
    if edge_row is None:
        edge_row = torch.repeat_interleave(torch.arange(num_dst, dtype=torch.int64, device=device), indptr.diff(),
                                           output_size=int(edge_src.numel()))
    not_loop = edge_src != edge_row  # dst row v is source v: a sampled self loop is the row's own loop
    if bool(not_loop.all()):
        counts = indptr.diff()  # k_v: the row's sampled neighbours
    else:
        edge_src, edge_row = edge_src[not_loop], edge_row[not_loop]
        counts = torch.bincount(edge_row, minlength=num_dst)
    rows = torch.arange(num_dst, dtype=torch.int64, device=device)
    per_row = counts + 1  # one self loop more per row
    new_indptr = torch.cat([indptr[:1], indptr[:1] + torch.cumsum(per_row, 0)])
    total = int(new_indptr[-1])
    # Row r's loop sits at its new start; kept edge i (in row r) moves past the r + 1 loops at or
    # before it. Writing through these positions (no boolean masks) halves the function's time.
    loop_pos = new_indptr[:-1]
    edge_pos = torch.arange(edge_src.numel(), dtype=torch.int64, device=device).add_(edge_row).add_(1)
    src = torch.empty(total, dtype=torch.int64, device=device)
    src.index_copy_(0, loop_pos, rows)
    src.index_copy_(0, edge_pos, edge_src)
    dst = torch.repeat_interleave(rows, per_row, output_size=total)
    degree = src_degree.to(torch.float32)
    inv_sqrt = (degree + 1.0).rsqrt()
    inv_dst = inv_sqrt[:num_dst]
    # k of a row's d neighbours were sampled: each stands for d/k of them, so the sampled sum is
    # unbiased (its expectation is the full sum). Without it training sees aggregations k/d too
    # small while evaluation (all neighbours, d/k = 1) sees the full ones. Folded with the row's
    # own 1/sqrt(d+1) into one factor per row, gathered once per edge.
    row_factor = degree[:num_dst].div(counts.clamp(min=1)).mul_(inv_dst)
    weight = torch.empty(total, dtype=torch.float32, device=device)
    weight.index_copy_(0, loop_pos, inv_dst * inv_dst)
    weight.index_copy_(0, edge_pos, inv_sqrt.index_select(0, edge_src).mul_(row_factor.index_select(0, edge_row)))
    return _replace(block, src=src, dst=dst, indptr=new_indptr, edge_weight=weight)


# Blocks of this many edges or more are normalised by one compiled loop (graphdist._numba) with the
# same results as the torch code: a 512-seed batch's two blocks (28,000 and 3,700 edges) took
# 0.52 ms of torch calls and take 0.17 ms. Smaller jobs never import numba.
COMPILED_MIN_EDGES = 2048


def _norm_loop() -> Any:
    """:func:`gcn_norm_block`'s arithmetic as one loop over the rows (float32, in the torch code's order)."""
    import graphdist.models._loops as _loops

    return _loops.gcn_norm


def _replace(block: Any, **changes: Any) -> Any:
    if dataclasses.is_dataclass(block):
        out = dataclasses.replace(block, **changes)
    else:
        out = copy.copy(block)
        for key, value in changes.items():
            setattr(out, key, value)
    # A cache copied along (copy.copy) would describe the old edges.
    if "_graphdist_cache" in getattr(out, "__dict__", {}):
        del out.__dict__["_graphdist_cache"]
    return out


class GCNLayer(nn.Module):
    """One GCN layer on a block (see the module docstring for the two normalisations).

    Args:
        in_dim: input feature size.
        out_dim: output feature size.

    Example:
        >>> GCNLayer(8, 4).weight.shape
        torch.Size([4, 8])
    """

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        # The weight is a bias-free Linear (sufficient factors can carry its gradient: see
        # graphdist.sync.sacp); the bias stays outside, added after propagation.
        self.lin = Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_dim))
        self.reset_parameters()

    @property
    def weight(self) -> nn.Parameter:
        return self.lin.weight

    def reset_parameters(self) -> None:
        # Glorot, as GCNConv.
        bound = math.sqrt(6.0 / (self.in_dim + self.out_dim))
        nn.init.uniform_(self.lin.weight, -bound, bound)
        nn.init.zeros_(self.bias)

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any) -> None:
        rename_legacy_keys(state_dict, prefix, {"weight": "lin.weight"})
        super()._load_from_state_dict(state_dict, prefix, *args)

    def forward(self, x: torch.Tensor, block: Any) -> torch.Tensor:
        if self.transforms_first(int(x.shape[0]), int(block.num_dst), int(block.src.numel())):
            return _propagate(self.lin(x), block) + self.bias
        return self.lin(_propagate(x, block)) + self.bias

    def transforms_first(self, num_src: int, num_dst: int, num_edges: int) -> bool:
        """Whether ``A (x W)`` costs fewer multiply-adds than ``(A x) W`` on a block of these sizes.

        Transforming first multiplies all ``num_src`` rows and aggregates ``out_dim``-wide rows;
        aggregating first multiplies only the ``num_dst`` rows. A sampled block has far fewer
        destinations than sources, so the classifier layer (128 -> 16 classes, 3,155 sources, 512
        destinations) aggregates first although it narrows: its backward took 0.15 ms less a step.

        Example:
            >>> layer = GCNLayer(128, 16)
            >>> layer.transforms_first(3155, 512, 5632), layer.transforms_first(3155, 3155, 35000)
            (False, True)
        """
        transform_first = num_src * self.in_dim * self.out_dim + num_edges * self.out_dim
        aggregate_first = num_edges * self.in_dim + num_dst * self.in_dim * self.out_dim
        return transform_first < aggregate_first

    @torch.no_grad()
    def load_gcnconv(self, conv: nn.Module) -> None:
        """Copies a PyG ``GCNConv``'s weights into this layer."""
        self.lin.weight.copy_(conv.lin.weight)
        self.bias.copy_(conv.bias)


def _propagate(x: torch.Tensor, block: Any) -> torch.Tensor:
    if getattr(block, "edge_weight", None) is not None:
        return aggregate(x, block, "weighted")
    # Fallback: (self + sampled neighbours) / (k_v + 1).
    k = in_degree(block).to(x.dtype).unsqueeze(1)
    return (aggregate(x, block, "sum") + x[: int(block.num_dst)]) / (k + 1.0)


class GCN(ReLUDropoutGNN):
    """Reference GCN: ``num_layers`` :class:`GCNLayer` with ReLU and dropout between.

    Args:
        in_dim: input feature size.
        hidden: hidden size.
        out_dim: number of classes.
        num_layers: number of layers (one block per layer).
        dropout: dropout after each hidden ReLU (default 0.5, Kipf & Welling).

    Example:
        >>> from graphdist.testing import tiny_graph
        >>> from sampling import NeighborSampler
        >>> g = tiny_graph(feature_dim=16)
        >>> batch = NeighborSampler(g, [2, 2], seed=0).sample(torch.tensor([0, 1]))
        >>> degs = [g.degrees()[batch.input_nodes[: b.num_src]] for b in batch.blocks]
        >>> model = GCN(16, 32, 4, num_layers=2)
        >>> logits = model(g.x[batch.input_nodes], [gcn_norm_block(b, deg_b) for b, deg_b in zip(batch.blocks, degs)])
        >>> model.needs_global_degrees, logits.shape
        (True, torch.Size([2, 4]))
    """

    # The trainer sees this and hands every block its sources' global in-degrees
    # (gcn_norm_block), so sampled training and evaluation use GCN's own normalisation.
    needs_global_degrees = True

    def __init__(self, in_dim: int, hidden: int, out_dim: int, num_layers: int = 2, dropout: float = 0.5) -> None:
        check_dims(in_dim, hidden, out_dim, num_layers, dropout)
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        super().__init__([GCNLayer(dims[i], dims[i + 1]) for i in range(num_layers)], dropout)


__all__ = ["GCN", "GCNLayer", "gcn_norm_block"]
