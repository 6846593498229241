"""GraphSAGE on message-flow blocks, built for one-thread CPU throughput.

Each layer computes ``h_v = W_self x_v + W_neigh mean_{u in N(v)} x_u + b`` for the
destination rows only, as ONE GEMM ``[x_dst | mean] @ [W_self | W_neigh]^T``; the mean
is a CSR sparse matmul built from ``block.indptr``/``block.src`` (values ``1/deg``) with
a transposed-CSR backward cached on the block. The first layer's input features do not
require grad, so the first layer computes only its weight gradient.

Equal to PyG's ``SAGEConv(aggr="mean", root_weight=True)`` with ``lin_r.weight = W_self``,
``lin_l.weight = W_neigh``, ``lin_l.bias = b`` (see :meth:`SAGELayer.load_sageconv`).

Example:
    >>> model = GraphSAGE(in_dim=16, hidden=32, out_dim=4, num_layers=2, dropout=0.5)
    >>> model.num_layers
    2
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any, Callable, Optional

import torch
from torch import nn

from graphdist.models.base import ReLUDropoutGNN, check_dims, rename_legacy_keys
from graphdist.models.dense import Linear, linear
from graphdist.models.ops import MEAN, SUM, aggregate, aggregate_with_halo, self_and_mean

AGGREGATORS = (MEAN, SUM, "max")


class SAGELayer(nn.Module):
    """One GraphSAGE layer: ``lin([x_dst | agg(x_src)])``, one ``nn.Linear(2*in_dim, out_dim)``.

    ``weight`` (``lin.weight``) is ``out_dim x 2*in_dim``: the first ``in_dim`` columns act on
    the node itself, the rest on the aggregated neighbours. The product is a ``Linear`` so that
    structure-aware sync (``graphdist.sync.sacp``) can send its gradient as sufficient factors.

    Args:
        in_dim: input feature size.
        out_dim: output feature size.
        aggr: ``"mean"`` (default), ``"sum"`` or ``"max"`` (max gathers ``E x F``: slow path).

    Example:
        >>> layer = SAGELayer(8, 4)
        >>> tuple(layer.weight.shape)
        (4, 16)
    """

    def __init__(self, in_dim: int, out_dim: int, aggr: str = MEAN) -> None:
        super().__init__()
        if aggr not in AGGREGATORS:
            raise ValueError(f"Expected aggr in {AGGREGATORS} (got {aggr!r})")
        self.in_dim, self.out_dim, self.aggr = in_dim, out_dim, aggr
        self.lin = Linear(2 * in_dim, out_dim)
        self.reset_parameters()

    @property
    def weight(self) -> nn.Parameter:
        return self.lin.weight

    @property
    def bias(self) -> nn.Parameter:
        return self.lin.bias

    def reset_parameters(self) -> None:
        # As two separate nn.Linear(in_dim, out_dim) would be initialised (PyG's SAGEConv).
        bound = 1.0 / math.sqrt(self.in_dim) if self.in_dim > 0 else 0.0
        nn.init.uniform_(self.lin.weight, -bound, bound)
        nn.init.uniform_(self.lin.bias, -bound, bound)

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any) -> None:
        rename_legacy_keys(state_dict, prefix, {"weight": "lin.weight", "bias": "lin.bias"})
        super()._load_from_state_dict(state_dict, prefix, *args)

    def forward(self, x: torch.Tensor, block: Any) -> torch.Tensor:
        """Pre-activation output for the block's ``num_dst`` destination rows."""
        if self.aggr == "max":
            z = torch.cat([x[: int(block.num_dst)], _max_aggregate(x, block)], dim=1)
        elif not torch.is_grad_enabled():
            return self._inference(x, block)
        else:
            z = self_and_mean(x, block, self.aggr)
        return self.lin(z)

    def _inference(self, x: torch.Tensor, block: Any) -> torch.Tensor:
        """The same output without autograd: :meth:`forward_with_halo` on a block whose sources are all in ``x``."""
        return self.forward_with_halo(x, block, _no_halo)

    def narrowed(self, x: torch.Tensor) -> Optional[torch.Tensor]:
        """``x W_neigh^T`` when this layer narrows (``out_dim < in_dim``, mean or sum), else None.

        Aggregation is linear, so ``W_neigh mean(x_u) = mean(W_neigh x_u)``: the classifier
        (256 -> a few classes) aggregates, and layer-at-a-time inference exchanges, ``out_dim``-wide
        rows. Measured on 1M nodes / 20M edges, one worker: that layer's sparse product took
        2.7 s at 256 wide; the whole evaluation went from 12.4 s to 8.4 s.
        """
        if self.aggr == "max" or self.out_dim >= self.in_dim:
            return None
        return linear(x, self.weight[:, self.in_dim :])

    def forward_with_halo(self, h: torch.Tensor, block: Any, fetch_halo: Callable[[torch.Tensor], Any]) -> torch.Tensor:
        """The layer over a partition's inner rows ``h`` (no autograd), its halo rows fetched while it works.

        ``fetch_halo(rows)`` starts the exchange of the halo's rows and returns a handle whose
        ``wait()`` gives them. What travels is :meth:`narrowed` where the layer narrows, else ``h``;
        the self term and the inner columns' aggregation are computed while it travels. ``W_self``
        and ``W_neigh`` apply as two products into one output, without the ``[x_dst | mean]`` copy
        training needs for its single GEMM (and for SACP's view of the Linear's input: there is no
        gradient here).
        """
        if self.aggr == "max":
            halo = fetch_halo(h).wait()
            return self(torch.cat([h, halo]) if halo.shape[0] else h, block)
        narrowed = self.narrowed(h)
        sources = narrowed if narrowed is not None else h
        pending = fetch_halo(sources)
        out = linear(h[: int(block.num_dst)], self.weight[:, : self.in_dim], self.bias)
        agg = aggregate_with_halo(sources, pending.wait, block, self.aggr)
        if narrowed is not None:
            return out.add_(agg)
        # In place (MKL): a second product's output would be one more rows x out_dim buffer at the
        # peak (1 GiB for 1M nodes x 256).
        return out.addmm_(agg, self.weight[:, self.in_dim :].t())

    @torch.no_grad()
    def load_sageconv(self, conv: nn.Module) -> None:
        """Copies the weights of a PyG ``SAGEConv(root_weight=True)`` into this layer."""
        self.weight[:, : self.in_dim].copy_(conv.lin_r.weight)
        self.weight[:, self.in_dim :].copy_(conv.lin_l.weight)
        self.bias.copy_(conv.lin_l.bias)


def _max_aggregate(x: torch.Tensor, block: Any) -> torch.Tensor:
    out = x.new_zeros(int(block.num_dst), x.shape[1])
    index = block.dst.view(-1, 1).expand(-1, x.shape[1])
    return out.scatter_reduce(0, index, x[block.src], reduce="amax", include_self=False)


def _no_halo(rows: torch.Tensor) -> Any:
    """A ``fetch_halo`` for a block whose source rows are all local: nothing travels."""
    return SimpleNamespace(wait=lambda: rows[:0])


class GraphSAGE(ReLUDropoutGNN):
    """Reference GraphSAGE: ``num_layers`` :class:`SAGELayer` with ReLU and dropout between.

    Model contract: ``forward(x, blocks)`` returns logits for ``blocks[-1].num_dst`` seeds;
    ``layer_forward(i, x, block)`` applies layer ``i`` (with its activation and dropout) for
    exact layer-at-a-time full-neighbour inference.

    Args:
        in_dim: input feature size.
        hidden: hidden size.
        out_dim: number of classes.
        num_layers: number of layers (>= 1; one block per layer).
        dropout: dropout after each hidden layer's ReLU (default 0.5 as in GraphSAGE/DGL).
        aggr: neighbour aggregation, ``"mean"`` (default), ``"sum"`` or ``"max"``.

    Example:
        >>> from graphdist.testing import tiny_graph
        >>> from sampling import NeighborSampler
        >>> g = tiny_graph(feature_dim=16)
        >>> batch = NeighborSampler(g, [2, 2, 2], seed=0).sample(torch.tensor([0, 1]))
        >>> model = GraphSAGE(16, 32, 4, num_layers=3, dropout=0.5)
        >>> logits = model(g.x[batch.input_nodes], batch.blocks)  # blocks[0] is the input layer
        >>> logits.shape, batch.blocks[0].num_src == len(batch.input_nodes)
        (torch.Size([2, 4]), True)
    """

    def __init__(
        self, in_dim: int, hidden: int, out_dim: int, num_layers: int = 2, dropout: float = 0.5, aggr: str = MEAN
    ) -> None:
        check_dims(in_dim, hidden, out_dim, num_layers, dropout)
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        super().__init__([SAGELayer(dims[i], dims[i + 1], aggr) for i in range(num_layers)], dropout)


__all__ = ["GraphSAGE", "SAGELayer", "aggregate"]
