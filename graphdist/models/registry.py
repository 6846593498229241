"""The reference model names: the one declaration (``--model`` choices and the config's check read it).

Names map to ``"module:Class"`` and are imported on first use, so reading them needs no torch.

Example:
    >>> sorted(MODELS)
    ['gat', 'gcn', 'graphsage', 'sage']
    >>> model_class("sage").__name__
    'GraphSAGE'
"""

from __future__ import annotations

import importlib
from typing import Any

MODELS: dict[str, str] = {
    "sage": "graphdist.models.sage:GraphSAGE",
    "graphsage": "graphdist.models.sage:GraphSAGE",
    "gcn": "graphdist.models.gcn:GCN",
    "gat": "graphdist.models.gat:GAT",
}


# Link prediction's pair decoders (models/link.py): the one declaration, read by the config too.
DECODERS = ("dot", "mlp")


def model_class(name: str) -> Any:
    """The class registered as ``name`` (case-insensitive).

    Raises:
        ValueError: an unknown name, listing the known ones.
    """
    key = name.lower()
    if key not in MODELS:
        raise ValueError(f"Expected model name one of {sorted(MODELS)} (got {name!r})")
    module, cls = MODELS[key].split(":")
    return getattr(importlib.import_module(module), cls)


__all__ = ["MODELS", "model_class"]
