"""Small user-style models for tests, in an importable module (spawned workers unpickle them)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


class PygGAT(torch.nn.Module):
    """A user GNN written with PyG's ``GATConv`` on blocks, as the README shows.

    Example:
        >>> m = PygGAT(16, 8, 3)
    """

    def __init__(self, in_dim: int, hidden: int, out_dim: int, heads: int = 2) -> None:
        super().__init__()
        from torch_geometric.nn import GATConv

        self.convs = torch.nn.ModuleList([
            GATConv(in_dim, hidden, heads=heads, add_self_loops=False),
            GATConv(hidden * heads, out_dim, heads=1, add_self_loops=False),
        ])

    def forward(self, x: torch.Tensor, blocks: Any) -> torch.Tensor:
        for i, (conv, block) in enumerate(zip(self.convs, blocks)):
            x = conv((x, x[: block.num_dst]), block.edge_index)
            if i < len(self.convs) - 1:
                x = F.elu(x)
        return x
