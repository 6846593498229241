"""``FullGraphNet``: a model run layer by layer over a worker's whole part, the halo exchanged between layers.

Built by the full-graph strategy (``trainers/fullgraph.py``) for training and by the start-up profiler
(``trainers/profile.py``) for its probes on a model copy; a module of its own so that the strategy,
which calls the profiler, and the profiler need not import each other.
"""

from __future__ import annotations

from typing import Any

import torch


class FullGraphNet(torch.nn.Module):
    """The model layer by layer over the whole part, the halo exchanged between layers.

    A module (not a loop in the strategy) so that DDP can wrap it: ``forward()`` takes no
    arguments, its inputs are the part's fixed features and block.

    Example:
        >>> from graphdist.models import GraphSAGE
        >>> from graphdist.testing import tiny_graph
        >>> from sampling.full import FullNeighborSampler
        >>> g = tiny_graph()
        >>> block = FullNeighborSampler(g, 1).sample(torch.arange(g.num_nodes)).blocks[0]
        >>> FullGraphNet(GraphSAGE(1, 4, 3, num_layers=1), None, g.x, block, torch.device("cpu"))().shape
        torch.Size([10, 3])
    """

    def __init__(self, model: torch.nn.Module, halo: Any, x0: torch.Tensor, block: Any, device: torch.device) -> None:
        super().__init__()
        self.model, self.halo, self.block, self.device = model, halo, block, device
        # Inner + halo input features, fetched once. A plain attribute, not a buffer: DDP would
        # broadcast rank 0's buffers over every rank's own part.
        self.x0 = x0

    def forward(self) -> torch.Tensor:
        h = self.model.layer_forward(0, self.x0, self.block)
        for i in range(1, self.model.num_layers):
            full = self.halo.exchange(i, h.cpu() if h.is_cuda else h)
            h = self.model.layer_forward(i, full.to(self.device), self.block)
        return h


__all__ = ["FullGraphNet"]
