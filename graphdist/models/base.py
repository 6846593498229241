"""What every reference model shares: a forward pass that applies ``layer_forward`` block by block.

A model that defines ``num_layers`` and ``layer_forward(i, x, block)`` gets exact
layer-at-a-time full-neighbour inference from the trainer; deriving from
:class:`LayerwiseGNN` gives it ``forward(x, blocks)`` for sampled training too.

Example:
    >>> class Identity(LayerwiseGNN):
    ...     num_layers = 1
    ...     def layer_forward(self, i, x, block):
    ...         return x[: block.num_dst]
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch import nn

from graphdist.models.ops import relu_dropout_


def check_dims(in_dim: int, hidden: int, out_dim: int, num_layers: int, dropout: float) -> None:
    """Raises ``ValueError`` on non-positive sizes, no layers, or dropout outside [0, 1)."""
    if num_layers < 1:
        raise ValueError(f"Expected num_layers >= 1 (got {num_layers})")
    if min(in_dim, hidden, out_dim) < 1:
        raise ValueError(f"Expected positive in_dim, hidden, out_dim (got {in_dim}, {hidden}, {out_dim})")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"Expected dropout in [0, 1) (got {dropout})")


def check_blocks(blocks: Sequence[Any], num_layers: int) -> None:
    """Raises ``ValueError`` unless there is one block per layer."""
    if len(blocks) != num_layers:
        raise ValueError(
            f"Expected one block per layer ({num_layers}) (got {len(blocks)}); "
            "give the sampler one fan-out per layer"
        )


def rename_legacy_keys(state_dict: dict, prefix: str, renames: dict[str, str]) -> None:
    """Renames ``prefix + old`` keys to ``prefix + new`` in place (checkpoints written before a layer
    moved its weight into a ``Linear`` submodule still load).

    Example:
        >>> sd = {"layers.0.weight": 1}
        >>> rename_legacy_keys(sd, "layers.0.", {"weight": "lin.weight"}); sd
        {'layers.0.lin.weight': 1}
    """
    for old, new in renames.items():
        if prefix + old in state_dict and prefix + new not in state_dict:
            state_dict[prefix + new] = state_dict.pop(prefix + old)


class LayerwiseGNN(nn.Module):
    """A GNN of per-block layers: ``forward`` runs ``layer_forward`` over the blocks in order.

    Subclasses set ``num_layers`` and implement ``layer_forward(i, x, block)`` (layer ``i``
    with its activation and dropout, returning the ``block.num_dst`` destination rows).
    """

    num_layers: int

    def layer_forward(self, i: int, x: torch.Tensor, block: Any) -> torch.Tensor:
        raise NotImplementedError

    def layer_forward_with_halo(self, i: int, h: torch.Tensor, block: Any,
                                fetch_halo: Callable[[torch.Tensor], Any]) -> torch.Tensor:
        """Layer ``i`` over a partition whose halo rows live on other workers (layer-at-a-time inference).

        ``h`` holds the inner rows; ``fetch_halo(rows)`` starts exchanging the halo nodes' rows
        of any per-inner-node tensor and returns a handle whose ``wait()`` gives them (a
        collective: call it exactly once). By default the layer's input ``h`` itself is
        exchanged and awaited at once; a model may exchange something narrower and compute
        while it travels (GraphSAGE: ``SAGELayer.forward_with_halo``).
        """
        halo = fetch_halo(h).wait()
        return self.layer_forward(i, torch.cat([h, halo]) if halo.shape[0] else h, block)

    def forward(self, x: torch.Tensor, blocks: Sequence[Any]) -> torch.Tensor:
        """Logits for the seeds of ``blocks[-1]``; ``x`` holds features of ``blocks[0]``'s sources."""
        check_blocks(blocks, self.num_layers)
        for i, block in enumerate(blocks):
            x = self.layer_forward(i, x, block)
        return x


class ReLUDropoutGNN(LayerwiseGNN):
    """``layers[i](x, block)`` with ReLU and dropout after every hidden layer (GraphSAGE, GCN)."""

    def __init__(self, layers: Sequence[nn.Module], dropout: float) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.num_layers, self.dropout = len(self.layers), float(dropout)

    def layer_forward(self, i: int, x: torch.Tensor, block: Any) -> torch.Tensor:
        """Layer ``i`` on one block, including ReLU and dropout for hidden layers."""
        return self._activate(i, self.layers[i](x, block))

    def _activate(self, i: int, h: torch.Tensor) -> torch.Tensor:
        return relu_dropout_(h, self.dropout, self.training) if i < self.num_layers - 1 else h

    def layer_forward_with_halo(self, i: int, h: torch.Tensor, block: Any,
                                fetch_halo: Callable[[torch.Tensor], Any]) -> torch.Tensor:
        """As :meth:`LayerwiseGNN.layer_forward_with_halo`; a layer with ``forward_with_halo`` runs it (without
        autograd), then the activation."""
        layer = self.layers[i]
        if not hasattr(layer, "forward_with_halo") or torch.is_grad_enabled():
            return super().layer_forward_with_halo(i, h, block, fetch_halo)
        return self._activate(i, layer.forward_with_halo(h, block, fetch_halo))
