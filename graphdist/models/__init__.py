"""Reference GNNs (GraphSAGE, GCN, GAT) on sampled blocks, and the adapter for user modules.

The model contract is ``forward(x, blocks) -> logits`` for ``blocks[-1].num_dst`` seeds;
reference models also expose ``num_layers`` and ``layer_forward(i, x, block)`` for exact
layer-at-a-time full-neighbour inference. See :mod:`graphdist.models.api`.

Example:
    >>> from graphdist.models import build_model
    >>> build_model("sage", 16, 32, 4, num_layers=2).num_layers
    2
"""

from graphdist._lazy import lazy_exports

_LAZY = {
    "BlockSequential": "graphdist.models.api",
    "GAT": "graphdist.models.gat",
    "GCN": "graphdist.models.gcn",
    "GCNLayer": "graphdist.models.gcn",
    "GraphSAGE": "graphdist.models.sage",
    "Linear": "graphdist.models.dense",
    "LinkPredictor": "graphdist.models.link",
    "MODELS": "graphdist.models.registry",
    "SAGELayer": "graphdist.models.sage",
    "aggregate": "graphdist.models.ops",
    "as_block_model": "graphdist.models.api",
    "build_model": "graphdist.models.api",
    "check_picklable": "graphdist.models.api",
    "gcn_norm_block": "graphdist.models.gcn",
    "model_class": "graphdist.models.registry",
    "relu_dropout_": "graphdist.models.ops",
    "self_and_mean": "graphdist.models.ops",
    "supports_layerwise": "graphdist.models.api",
}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
