"""``LinkPredictor``: any node encoder plus a decoder that scores pairs of nodes (link prediction).

The encoder is a model of the usual contract (``forward(x, blocks)``, GraphSAGE, GCN, GAT or a
user's) whose output is an embedding per seed; the decoder scores a pair ``(u, v)`` from their
embeddings: ``dot`` (``<h_u, h_v>``, no parameters) or ``mlp`` (``h_u * h_v`` through
``Linear -> ReLU -> Linear``, as PyG's link examples). Scores are logits: ``sigmoid`` is the
probability of an edge. Layer-wise inference sees the encoder (``num_layers``,
``layer_forward``), so evaluation embeds every node exactly, then scores pairs.

Example:
    >>> from graphdist.models import build_model
    >>> from graphdist.testing import tiny_graph
    >>> from sampling import NeighborSampler
    >>> g = tiny_graph(feature_dim=4)
    >>> model = LinkPredictor(build_model("sage", 4, 8, 8, num_layers=1), decoder="mlp", hidden=8)
    >>> batch = NeighborSampler(g, [-1], seed=0).sample(torch.tensor([0, 3, 5]))
    >>> model(g.x[batch.input_nodes], batch.blocks, torch.tensor([[0, 1], [2, 2]])).shape
    torch.Size([2])
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch
from torch import nn

from graphdist.models.registry import DECODERS


class LinkPredictor(nn.Module):
    """An encoder of nodes and a decoder of pairs.

    Args:
        encoder: the node model (its output width is the embedding width).
        decoder: ``dot`` or ``mlp``.
        hidden: the embedding width (``mlp`` only).

    Raises:
        ValueError: an unknown decoder, or ``mlp`` without ``hidden``.
    """

    def __init__(self, encoder: nn.Module, decoder: str = "dot", hidden: Optional[int] = None) -> None:
        super().__init__()
        if decoder not in DECODERS:
            raise ValueError(f"--decoder must be one of {', '.join(DECODERS)} (got {decoder!r})")
        self.encoder = encoder
        self.decoder = decoder
        self.mlp: Optional[nn.Module] = None
        if decoder == "mlp":
            if not hidden:
                raise ValueError("decoder 'mlp' needs the embedding width (hidden=)")
            self.mlp = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        # Layer-wise inference and GCN's degree column go to the encoder.
        self.needs_global_degrees = bool(getattr(encoder, "needs_global_degrees", False))
        if hasattr(encoder, "layer_forward"):
            self.num_layers = encoder.num_layers
            self.layer_forward = encoder.layer_forward

    def score(self, h_u: torch.Tensor, h_v: torch.Tensor) -> torch.Tensor:
        """Logits of pairs ``(u, v)`` from their embeddings ``[P, H]`` each."""
        if self.mlp is None:
            return (h_u * h_v).sum(dim=-1)
        return self.mlp(h_u * h_v).squeeze(-1)

    def forward(self, x: torch.Tensor, blocks: Sequence[Any], pairs: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The seeds' embeddings, or with ``pairs`` (``[2, P]`` positions among the seeds) their logits."""
        h = self.encoder(x, blocks)
        if pairs is None:
            return h
        return self.score(h.index_select(0, pairs[0]), h.index_select(0, pairs[1]))


__all__ = ["DECODERS", "LinkPredictor"]
