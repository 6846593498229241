"""Reference GNNs (GraphSAGE, GCN, GAT) on sampled blocks, and the adapter for user modules.

The model contract is ``forward(x, blocks) -> logits`` for ``blocks[-1].num_dst`` seeds;
reference models also expose ``num_layers`` and ``layer_forward(i, x, block)`` for exact
layer-wise full-neighbour inference. See :mod:`graphdist.models.api`.

Example:
    >>> from graphdist.models import build_model
    >>> build_model("sage", 16, 32, 4, num_layers=2).num_layers
    2
"""

from graphdist.models.api import (
    MODELS,
    BlockSequential,
    as_block_model,
    build_model,
    check_picklable,
    supports_layerwise,
)
from graphdist.models.gat import GAT
from graphdist.models.gcn import GCN, GCNLayer, gcn_norm_block
from graphdist.models.ops import aggregate, relu_dropout_, self_and_mean
from graphdist.models.sage import GraphSAGE, SAGELayer

__all__ = [
    "BlockSequential",
    "GAT",
    "GCN",
    "GCNLayer",
    "GraphSAGE",
    "MODELS",
    "SAGELayer",
    "aggregate",
    "as_block_model",
    "build_model",
    "check_picklable",
    "gcn_norm_block",
    "relu_dropout_",
    "self_and_mean",
    "supports_layerwise",
]
