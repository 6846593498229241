"""Which parameters form a layer: the unit a layer-wise sync sends at once.

Example:
    >>> import torch
    >>> [layer.name for layer in discover_layers(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)))]
    ['0', '1']
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import torch  # noqa: F401 - the examples use it
from torch import nn

from graphdist.sync.stats import Layer

# A caller's grouping: per layer a module, a parameter, or a list of them.
LayerSpec = Sequence[Union[nn.Module, nn.Parameter, Sequence[Union[nn.Module, nn.Parameter]]]]


def discover_layers(model: nn.Module, skip: frozenset[int] = frozenset()) -> list[Layer]:
    """Layers in forward (registration) order: every module owning trainable parameters directly.

    ``skip``: ids of parameters synced elsewhere (sparse tables: ``graphdist.sync.tables``).

    A container such as PyG's ``GraphSAGE.convs`` owns none and is not a layer; each conv's
    ``Linear`` is. A parameter shared by two modules belongs to the first.

    Example:
        >>> [l.name for l in discover_layers(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU()))]
        ['0']
    """
    seen: set[int] = set(skip)
    layers = []
    for name, module in model.named_modules():
        params = [p for p in module.parameters(recurse=False) if p.requires_grad and id(p) not in seen]
        if params:
            seen.update(id(p) for p in params)
            layers.append(Layer(name or type(module).__name__, params, sum(p.numel() for p in params), (module,)))
    return layers


def explicit_layers(model: nn.Module, spec: LayerSpec, skip: frozenset[int] = frozenset()) -> list[Layer]:
    """Layers as the caller grouped them (forward order); every trainable parameter exactly once, but those
    in ``skip`` (synced elsewhere), which are left out.

    Raises:
        ValueError: a parameter in two layers, or in none.

    Example:
        >>> net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
        >>> [l.name for l in explicit_layers(net, [[net[0], net[1]]])]
        ['group0']
    """
    layers, seen = [], set()
    for i, entry in enumerate(spec):
        items = [entry] if isinstance(entry, (nn.Module, nn.Parameter)) else list(entry)
        params: list[nn.Parameter] = []
        for item in items:
            found = [item] if isinstance(item, nn.Parameter) else list(item.parameters())
            for p in found:
                if not p.requires_grad or id(p) in skip:
                    continue
                if id(p) in seen:
                    raise ValueError(f"Expected every parameter in one layer only (got a repeat in layer {i})")
                seen.add(id(p))
                params.append(p)
        if params:
            name = _module_name(model, entry) or f"group{i}"
            modules = tuple(item for item in items if isinstance(item, nn.Module))
            layers.append(Layer(name, params, sum(p.numel() for p in params), modules))
    missing = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in seen and id(p) not in skip]
    if missing:
        raise ValueError(
            f"Expected every trainable parameter in exactly one layer (got {len(missing)} in none: "
            f"{', '.join(missing[:5])}{'...' if len(missing) > 5 else ''}); add them to `layers`"
        )
    return layers


def _module_name(model: nn.Module, entry: Any) -> Optional[str]:
    if isinstance(entry, nn.Module):
        for name, module in model.named_modules():
            if module is entry:
                return name or type(module).__name__
    return None


__all__ = ["LayerSpec", "discover_layers", "explicit_layers"]
