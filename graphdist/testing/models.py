"""Small user-style models for tests, in an importable module (spawned workers unpickle them)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


class PygGAT(torch.nn.Module):
    """A user GNN written with PyG's ``GATConv`` on blocks, the way docs/models-and-tasks.md writes one.

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


def input_gradient_node(output: torch.Tensor, inp: torch.Tensor) -> Any:
    """The autograd node below ``output`` that hands ``inp`` its gradient (a walk of the graph).

    A pre-hook on it fires when backward starts computing ``inp``'s gradient: tests use it to
    check what happened before (e.g. a layer's collective left before its input gradient's GEMM).

    Example:
        >>> x = torch.ones(2, 3, requires_grad=True).tanh()
        >>> type(input_gradient_node(torch.nn.Linear(3, 1)(x), x)).__name__
        'AddmmBackward0'
    """
    todo, seen = [output.grad_fn], set()
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if any(nxt is inp.grad_fn for nxt, _ in node.next_functions):
            return node
        todo += [nxt for nxt, _ in node.next_functions]
    raise ValueError("no node below output computes the input's gradient")
