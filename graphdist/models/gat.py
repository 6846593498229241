"""GAT on message-flow blocks: PyG's ``GATConv`` applied to ``(x, x[:num_dst])`` pairs.

Self loops: ``GATConv`` adds one per destination node (destination ``i`` is source ``i``
in a block), so every seed attends to itself as in the full-graph model.

Example:
    >>> model = GAT(16, 8, 4, num_layers=2, dropout=0.5, heads=4)
    >>> model.num_layers
    2
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from graphdist.models.base import LayerwiseGNN, check_dims


class GAT(LayerwiseGNN):
    """Reference GAT: hidden layers concatenate ``heads`` heads (ELU, dropout); the last
    layer averages ``out_heads`` heads into ``out_dim`` logits.

    Args:
        in_dim: input feature size.
        hidden: per-head hidden size (a hidden layer outputs ``hidden * heads``).
        out_dim: number of classes.
        num_layers: number of layers (one block per layer).
        dropout: feature dropout after each hidden layer (default 0.5).
        heads: attention heads of the hidden layers (default 4).
        out_heads: heads of the output layer, averaged (default 1).
        attn_dropout: dropout on attention coefficients (default 0.0).

    Example:
        >>> from graphdist.testing import tiny_graph
        >>> from sampling import NeighborSampler
        >>> g = tiny_graph(feature_dim=16)
        >>> batch = NeighborSampler(g, [2, 2], seed=0).sample(torch.tensor([0, 1]))
        >>> model = GAT(16, 8, 4, num_layers=2, heads=2)
        >>> model(g.x[batch.input_nodes], batch.blocks).shape  # logits for the 2 seeds
        torch.Size([2, 4])
    """

    def __init__(
        self,
        in_dim: int,
        hidden: int,
        out_dim: int,
        num_layers: int = 2,
        dropout: float = 0.5,
        heads: int = 4,
        out_heads: int = 1,
        attn_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        from torch_geometric.nn import GATConv  # lazy: spawned workers that never build a GAT start faster

        check_dims(in_dim, hidden, out_dim, num_layers, dropout)
        if heads < 1 or out_heads < 1:
            raise ValueError(f"Expected heads >= 1 and out_heads >= 1 (got {heads}, {out_heads})")
        convs = []
        for i in range(num_layers):
            last = i == num_layers - 1
            conv_in = in_dim if i == 0 else hidden * heads
            if last:
                convs.append(GATConv(conv_in, out_dim, heads=out_heads, concat=False, dropout=attn_dropout))
            else:
                convs.append(GATConv(conv_in, hidden, heads=heads, concat=True, dropout=attn_dropout))
        self.convs = nn.ModuleList(convs)
        self.num_layers, self.dropout = num_layers, float(dropout)

    def layer_forward(self, i: int, x: torch.Tensor, block: Any) -> torch.Tensor:
        """Layer ``i`` on one block, including ELU and dropout for hidden layers."""
        h = self.convs[i]((x, x[: int(block.num_dst)]), block.edge_index)
        if i < self.num_layers - 1:
            h = F.dropout(F.elu(h), self.dropout, self.training)
        return h


__all__ = ["GAT"]
