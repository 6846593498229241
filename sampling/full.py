"""Full-neighbour layer-at-a-time inference: every node's output, one layer at a time, in chunks.

Sampling all L-hop neighbourhoods of a chunk of seeds blows up (a 3-hop full neighbourhood of
1,000 nodes is often most of the graph). Layer-at-a-time inference instead computes layer ``i``'s
output for *all* nodes, chunk by chunk of destinations, from layer ``i-1``'s outputs over
1-hop full-neighbour blocks, and only then moves to layer ``i+1``: every edge is used once per
layer and memory holds two ``[N, hidden]`` tables (DGL's and PyG's recommended offline
inference).

The model contract (``LayerwiseModel``): ``num_layers`` and
``layer_forward(i, x, block) -> Tensor``, where ``x`` holds the features of the block's
*source* nodes (``[block.num_src, F]``; the destinations' own features are
``x[:block.num_dst]``) and the result is ``[block.num_dst, F_out]``, activation (and anything
else that follows layer ``i`` in ``forward``) applied. A model's ``forward(x, blocks)`` is then
usually ``for i, b in enumerate(blocks): x = self.layer_forward(i, x, b)``. ``as_layerwise`` wraps
a list of PyG bipartite convolutions (``SAGEConv``, ``GATConv``, ``GraphConv``, ...).

Example:
    >>> from graphdist.testing import tiny_graph
    >>> class Mean(torch.nn.Module):
    ...     num_layers = 1
    ...     def layer_forward(self, i, x, block):
    ...         return block.adj() @ x / block.in_degrees().clamp(min=1).unsqueeze(1)
    >>> g = tiny_graph()
    >>> full_neighbor_inference(Mean(), g, g.x, batch_size=4)[0].tolist()  # mean of nodes 1, 4, 9
    [4.666666507720947]
"""

from __future__ import annotations

from typing import Callable, Optional, Protocol, Sequence, Union, runtime_checkable

import torch
from torch import Tensor, nn

from graphdist.data.graph import Graph
from sampling.base import Block, FeatureSource, NeighborSource, SampledBatch, Sampler
from sampling.neighbor import CSRNeighborSource, NeighborSampler

__all__ = ["LayerwiseModel", "FullNeighborSampler", "full_neighbor_inference", "as_layerwise"]


@runtime_checkable
class LayerwiseModel(Protocol):
    """A GNN that can run one layer on one block: what ``full_neighbor_inference`` needs.

    Attributes:
        num_layers: number of message-passing layers.

    ``layer_forward(i, x, block)``: layer ``i`` on ``block`` with source features ``x``
    (``[block.num_src, F_i]``); returns ``[block.num_dst, F_{i+1}]`` with everything that
    follows the layer in the full forward (activation, normalisation; dropout is off in eval).
    """

    num_layers: int

    def layer_forward(self, i: int, x: Tensor, block: Block) -> Tensor: ...


class FullNeighborSampler(NeighborSampler):
    """All neighbours on every layer: ``NeighborSampler(source, [-1] * num_layers)``.

    Example:
        >>> from graphdist.testing import tiny_graph
        >>> FullNeighborSampler(tiny_graph(), 1).sample(torch.tensor([0])).blocks[0].num_edges
        3
    """

    def __init__(self, source: Union[Graph, NeighborSource], num_layers: int, relabel: str = "auto") -> None:
        if num_layers < 1:
            raise ValueError(f"num_layers: expected >= 1 (got {num_layers})")
        # Nothing random is drawn; the fixed seed only avoids touching torch's global RNG.
        super().__init__(source, [-1] * num_layers, seed=0, relabel=relabel)


class _PyGLayerwise(nn.Module):
    def __init__(self, convs: Sequence[nn.Module], activation: Callable[[Tensor], Tensor]) -> None:
        super().__init__()
        self.convs = nn.ModuleList(convs)
        self.activation = activation

    @property
    def num_layers(self) -> int:  # type: ignore[override]
        return len(self.convs)

    def layer_forward(self, i: int, x: Tensor, block: Block) -> Tensor:
        h = self.convs[i](block.pair(x), block.edge_index, size=block.size)
        return self.activation(h) if i < len(self.convs) - 1 else h

    def forward(self, x: Tensor, blocks: Sequence[Block]) -> Tensor:
        for i, block in enumerate(blocks):
            x = self.layer_forward(i, x, block)
        return x


def as_layerwise(convs: Sequence[nn.Module], activation: Callable[[Tensor], Tensor] = torch.relu) -> nn.Module:
    """Wraps PyG bipartite convolutions as a ``LayerwiseModel`` (activation between layers).

    Args:
        convs: one conv per layer, each callable as ``conv((x_src, x_dst), edge_index, size=...)``.
        activation: applied after every layer but the last. Default ``torch.relu``.

    Returns:
        A module with ``num_layers``, ``layer_forward`` and ``forward(x, blocks)``.

    Example:
        >>> from torch_geometric.nn import SAGEConv
        >>> model = as_layerwise([SAGEConv(1, 8), SAGEConv(8, 2)])
        >>> model.num_layers
        2
    """
    return _PyGLayerwise(convs, activation)


@torch.no_grad()
def full_neighbor_inference(
    model: LayerwiseModel,
    graph: Union[Graph, NeighborSource],
    features: Union[Tensor, FeatureSource],
    batch_size: int = 4096,
    device: Optional[Union[str, torch.device]] = None,
) -> Tensor:
    """Runs ``model`` on every node, layer by layer, over full-neighbour 1-hop blocks.

    Args:
        model: a ``LayerwiseModel``; put into eval mode for the call (its mode is restored).
        graph: a ``Graph`` or any ``NeighborSource`` (e.g. the distributed one).
        features: ``[N, F]`` input features, or a ``FeatureSource`` read chunk by chunk.
        batch_size: destination nodes per chunk. Default 4096.
        device: where the layers run (the ``[N, hidden]`` tables stay on CPU). Default: CPU.

    Returns:
        ``[N, F_out]`` outputs of the last layer, on CPU.

    Raises:
        ValueError: if ``model`` lacks ``num_layers``/``layer_forward`` or ``batch_size < 1``.

    Example:
        >>> from graphdist.models import build_model
        >>> from graphdist.testing import random_graph
        >>> g = random_graph(30, seed=0, feature_dim=4)
        >>> full_neighbor_inference(build_model("sage", 4, 8, 3), g, g.x, batch_size=8).shape
        torch.Size([30, 3])
    """
    if not isinstance(model, LayerwiseModel):
        raise ValueError(
            f"model: expected a LayerwiseModel with num_layers and layer_forward(i, x, block) "
            f"(got {type(model).__name__}); wrap PyG convs with as_layerwise(convs)"
        )
    if batch_size < 1:
        raise ValueError(f"batch_size: expected >= 1 (got {batch_size})")
    source = CSRNeighborSource(graph) if isinstance(graph, Graph) else graph
    sampler = FullNeighborSampler(source, 1)
    num_nodes = source.num_nodes
    training = getattr(model, "training", False)
    if isinstance(model, nn.Module):
        model.eval()
    try:
        h: Union[Tensor, FeatureSource] = features
        for i in range(model.num_layers):
            h = _one_layer(model, i, sampler, h, num_nodes, batch_size, device)
    finally:
        if isinstance(model, nn.Module):
            model.train(training)
    assert isinstance(h, Tensor)
    return h


def _one_layer(
    model: LayerwiseModel,
    i: int,
    sampler: Sampler,
    h: Union[Tensor, FeatureSource],
    num_nodes: int,
    batch_size: int,
    device: Optional[Union[str, torch.device]],
) -> Tensor:
    out: Optional[Tensor] = None
    for start in range(0, num_nodes, batch_size):
        end = min(start + batch_size, num_nodes)
        batch: SampledBatch = sampler.sample(torch.arange(start, end))
        x = h.gather(batch.input_nodes) if isinstance(h, FeatureSource) else h.index_select(0, batch.input_nodes)
        block = batch.blocks[0]
        if device is not None:
            x, block = x.to(device), block.to(device)
        y = model.layer_forward(i, x, block)
        if out is None:
            out = torch.empty((num_nodes, y.shape[1]), dtype=y.dtype)
        out[start:end] = y.cpu()
    if out is None:
        return torch.zeros((0, 0))
    return out
